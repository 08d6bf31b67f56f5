package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// MaxBootstrap is the size budget of one function's bootstrap: smaller
// zips deploy faster and cold-start faster (the performance target: at
// most 12 MiB while the features grow).
const MaxBootstrap = 12 << 20

// TestBootstrapsAreLean builds every function as `make build` does and
// checks its size, that no test-only or embedded-Redis package is linked,
// nor the protobuf runtime (1.4 MB; the phonenumbers fork decodes its
// metadata without it), and that the linker's dead-method elimination is on (a dependency that
// calls reflect's Method or MethodByName switches it off for the whole
// program: google.golang.org/protobuf before v1.36.12 did).
func TestBootstrapsAreLean(t *testing.T) {
	dir := t.TempDir()
	for _, f := range functions(t) {
		recipe := makeTarget(t, f.name)
		if !strings.Contains(recipe, "-s -w") {
			t.Fatalf("build-%s does not strip: %s", f.name, recipe)
		}
		out := filepath.Join(dir, f.dir)
		build := exec.Command("go", "build", "-tags", "lambda.norpc", "-trimpath", "-ldflags=-s -w -buildid=", "-o", out, "./functions/"+f.dir)
		build.Dir = root
		build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=arm64")
		if b, err := build.CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", f.dir, err, b)
		}
		st, err := os.Stat(out)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%-16s %9d bytes %6.2f MiB", f.name, st.Size(), float64(st.Size())/(1<<20))
		if st.Size() > MaxBootstrap {
			t.Errorf("%s: bootstrap is %d bytes, over the %d budget", f.name, st.Size(), MaxBootstrap)
		}
		deps, err := goList(f.dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, banned := range []string{"github.com/alicebob/miniredis", "github.com/yuin/gopher-lua", "github.com/otpguard/otpguard/internal/localredis", "github.com/otpguard/otpguard/guard/outbox", "google.golang.org/protobuf"} {
			if strings.Contains(string(deps), banned) {
				t.Errorf("%s links %s", f.name, banned)
			}
		}
	}

	// Dead-method elimination: go-redis's command set is a few hundred
	// exported methods; the guard calls a dozen. With elimination on,
	// an unused one (GeoAdd) is absent from the symbol table.
	sym := filepath.Join(dir, "verify.symbols")
	build := exec.Command("go", "build", "-tags", "lambda.norpc", "-trimpath", "-o", sym, "./functions/verify")
	build.Dir = root
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=arm64")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, b)
	}
	nm, err := exec.Command("go", "tool", "nm", sym).Output()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(nm), "go-redis/v9.cmdable.FunctionLoad") {
		t.Fatal("the symbol table lacks a method the guard calls; the check is broken")
	}
	if strings.Contains(string(nm), "go-redis/v9.cmdable.GeoAdd") {
		t.Error("an unused method (go-redis GeoAdd) is linked: dead-method elimination is off (look for reflect Method/MethodByName in a dependency)")
	}
}

// goList lists the packages functions/<dir> links, resolved in the product
// module (not this test module, whose versions may differ).
func goList(dir string) ([]byte, error) {
	cmd := exec.Command("go", "list", "-tags", "lambda.norpc", "-deps", "./functions/"+dir)
	cmd.Dir = root
	return cmd.Output()
}
