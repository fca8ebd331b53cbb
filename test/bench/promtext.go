package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// sample is one line of the Prometheus text exposition format.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

// scrape reads http://addr/metrics.
func scrape(ctx context.Context, addr string) ([]sample, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	// Ask for the plain text format, not OpenMetrics or protobuf.
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scraping %s: %w", addr, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scraping %s: %s", addr, resp.Status)
	}
	return parseText(resp.Body)
}

// parseText parses the text format minimally: comments are skipped; a line
// is name{label="value",…} value [timestamp].
func parseText(r io.Reader) ([]sample, error) {
	var out []sample
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		s, err := parseLine(line)
		if err != nil {
			return nil, fmt.Errorf("metrics line %q: %w", line, err)
		}
		out = append(out, s)
	}
	return out, sc.Err()
}

func parseLine(line string) (sample, error) {
	s := sample{labels: map[string]string{}}
	i := strings.IndexAny(line, "{ ")
	if i < 0 {
		return s, fmt.Errorf("no value")
	}
	s.name = line[:i]
	rest := line[i:]
	if rest[0] == '{' {
		rest = rest[1:]
		for {
			rest = strings.TrimLeft(rest, ", ")
			if rest == "" {
				return s, fmt.Errorf("unterminated labels")
			}
			if rest[0] == '}' {
				rest = rest[1:]
				break
			}
			eq := strings.IndexByte(rest, '=')
			if eq < 0 || eq+1 >= len(rest) || rest[eq+1] != '"' {
				return s, fmt.Errorf("bad label")
			}
			key := strings.TrimSpace(rest[:eq])
			rest = rest[eq+2:]
			var val strings.Builder
			j := 0
			for ; j < len(rest) && rest[j] != '"'; j++ {
				if rest[j] == '\\' && j+1 < len(rest) {
					j++
					switch rest[j] {
					case 'n':
						val.WriteByte('\n')
					default:
						val.WriteByte(rest[j])
					}
					continue
				}
				val.WriteByte(rest[j])
			}
			if j == len(rest) {
				return s, fmt.Errorf("unterminated label value")
			}
			s.labels[key] = val.String()
			rest = rest[j+1:]
		}
	}
	f := strings.Fields(rest)
	if len(f) == 0 {
		return s, fmt.Errorf("no value")
	}
	v, err := parseFloat(f[0])
	if err != nil {
		return s, err
	}
	s.value = v
	return s, nil
}

func parseFloat(s string) (float64, error) {
	switch s {
	case "+Inf":
		return math.Inf(1), nil
	case "-Inf":
		return math.Inf(-1), nil
	}
	return strconv.ParseFloat(s, 64)
}

// value sums the samples called name whose labels include match.
func value(samples []sample, name string, match map[string]string) float64 {
	var v float64
	for _, s := range samples {
		if s.name == name && matches(s, match) {
			v += s.value
		}
	}
	return v
}

func matches(s sample, match map[string]string) bool {
	for k, want := range match {
		if s.labels[k] != want {
			return false
		}
	}
	return true
}

// bucket is one cumulative histogram bucket.
type bucket struct {
	le    float64
	count float64
}

// histogram returns the cumulative buckets of histogram name (summed over
// the series that match), sorted by upper bound.
func histogram(samples []sample, name string, match map[string]string) []bucket {
	byLE := map[float64]float64{}
	for _, s := range samples {
		if s.name != name+"_bucket" || !matches(s, match) {
			continue
		}
		le, err := parseFloat(s.labels["le"])
		if err != nil {
			continue
		}
		byLE[le] += s.value
	}
	out := make([]bucket, 0, len(byLE))
	for le, c := range byLE {
		out = append(out, bucket{le, c})
	}
	slices.SortFunc(out, func(a, b bucket) int {
		switch {
		case a.le < b.le:
			return -1
		case a.le > b.le:
			return 1
		}
		return 0
	})
	return out
}

// subtract returns after − before, bucket by bucket (the same buckets).
func subtract(after, before []bucket) []bucket {
	prev := map[float64]float64{}
	for _, b := range before {
		prev[b.le] = b.count
	}
	out := make([]bucket, len(after))
	for i, b := range after {
		out[i] = bucket{b.le, b.count - prev[b.le]}
	}
	return out
}

// quantile estimates the q-quantile of cumulative buckets by linear
// interpolation inside the bucket that holds it (as PromQL's
// histogram_quantile does), and returns the bucket's bounds. A quantile in
// the +Inf bucket is reported as the highest finite bound.
func quantile(q float64, bs []bucket) (v, lo, hi float64, ok bool) {
	if len(bs) == 0 {
		return 0, 0, 0, false
	}
	total := bs[len(bs)-1].count
	if total <= 0 {
		return 0, 0, 0, false
	}
	rank := q * total
	var prevLE, prevCount float64
	for _, b := range bs {
		if b.count >= rank && b.count > prevCount {
			if math.IsInf(b.le, 1) {
				return prevLE, prevLE, b.le, true
			}
			return prevLE + (b.le-prevLE)*(rank-prevCount)/(b.count-prevCount), prevLE, b.le, true
		}
		prevLE, prevCount = b.le, b.count
	}
	return prevLE, prevLE, prevLE, true
}
