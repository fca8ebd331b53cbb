package test

import (
	"os"
	"os/exec"
	"strconv"
	"testing"

	"github.com/effectively-io/effectively/internal/proctest"
)

// stack/with-stack.sh, which make test, make chaos and make bench run under,
// must leave up what the user had started (make demo, make stack-up) and stop
// only what it started itself. The shell test drives it on an instance of
// its own, on free ports.
func TestWithStackKeepsWhatWasUp(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("../stack/with-stack_test.sh")
	ports := proctest.FreePorts(t, 5)
	cmd.Env = append(os.Environ(),
		"WITH_STACK_TEST_PG_PORT="+strconv.Itoa(ports[0]),
		"WITH_STACK_TEST_KAFKA_PORT="+strconv.Itoa(ports[1]),
		"WITH_STACK_TEST_CONTROLLER_PORT="+strconv.Itoa(ports[2]),
		"WITH_STACK_TEST_REGISTRY_PORT="+strconv.Itoa(ports[3]),
		"WITH_STACK_TEST_REGISTRY_MGMT_PORT="+strconv.Itoa(ports[4]),
	)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("stack/with-stack_test.sh: %v\n%s", err, out)
	}
}
