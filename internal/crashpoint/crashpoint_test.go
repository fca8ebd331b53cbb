//go:build !crashpoint

package crashpoint

import "testing"

// Without the crashpoint tag nothing reads the environment: even a name that
// a crashpoint build refuses is no error, and no point fires.
func TestReleaseBuildIgnoresEnv(t *testing.T) {
	t.Setenv(EnvVar, "nonsense")
	if err := Check(); err != nil {
		t.Fatalf("Check() = %v, want nil in a build without the crashpoint tag", err)
	}
	t.Setenv(EnvVar, BeforeDBCommit)
	Hit(BeforeDBCommit) // would SIGKILL the test binary in a crashpoint build
	if Enabled {
		t.Fatal("Enabled is true without the crashpoint tag")
	}
}
