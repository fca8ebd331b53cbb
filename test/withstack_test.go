package test

import (
	"os"
	"os/exec"
	"strconv"
	"testing"
)

// stack/with-stack.sh, which make test, make chaos and make bench run under,
// must leave up what the user had started (make demo, make stack-up) and stop
// only what it started itself. The shell test drives it on an instance of
// its own, on free ports.
func TestWithStackKeepsWhatWasUp(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("../stack/with-stack_test.sh")
	cmd.Env = append(os.Environ(),
		"WITH_STACK_TEST_PG_PORT="+strconv.Itoa(freePort(t)),
		"WITH_STACK_TEST_KAFKA_PORT="+strconv.Itoa(freePort(t)),
		"WITH_STACK_TEST_CONTROLLER_PORT="+strconv.Itoa(freePort(t)),
	)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("stack/with-stack_test.sh: %v\n%s", err, out)
	}
}
