package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// clientInstructions counts the guard's own instructions per decision,
// the client's side of what instructions counts on the server: the
// product's BenchmarkAllow (guard/redisstore, on its own redis-server)
// under valgrind's cachegrind with one P, run for clientFew and then
// clientMany decisions, the difference divided by the decisions between
// (the setup, the same in both, falls out). Like the server's count, it
// moves by about 1% from run to run whatever the machine does, where
// the client's CPU time moves by 10–20%: a change to the guard, the store
// or go-redis shows its cost here. (The runtime's work is counted:
// allocation, the collector, the scheduler waiting on the network.)
func (b *bench) clientInstructions(ctx context.Context) error {
	dir, err := os.MkdirTemp("", "otpguard-client-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "redisstore.test")
	build := exec.CommandContext(ctx, "go", "test", "-c", "-o", bin, "./guard/redisstore/")
	build.Dir = "../.."
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("build the store's tests: %v\n%s", err, out)
	}
	fmt.Printf("\nclient: the guard's instructions per decision, its store and go-redis and the Go runtime included (valgrind cachegrind, one P, %d decisions less %d)\n\n", clientMany, clientFew)
	tw := newTable("decision\tinstructions/decision\tallocations/decision\t")
	for _, c := range []struct {
		name, bench string
		alike       bool // every decision of the run is of the row's kind (its allocations are the row's)
	}{
		{"3-rule allowed decision (BenchmarkAllow/allowed)", "BenchmarkAllow$/allowed$", true},
		// (each run's first pass over the requests is denied by Redis: the
		// difference is the cached denials alone, the allocations are not)
		{"a denial the deny cache answers (BenchmarkAllow/denied-cached)", "BenchmarkAllow$/denied-cached$", false},
	} {
		few, _, err := cachegrind(ctx, bin, c.bench, clientFew)
		if err != nil {
			return err
		}
		many, allocs, err := cachegrind(ctx, bin, c.bench, clientMany)
		if err != nil {
			return err
		}
		if !c.alike {
			allocs = "—"
		}
		fmt.Fprintf(tw, "%s\t%.0f\t%s\t\n", c.name, float64(many-few)/float64(clientMany-clientFew), allocs)
	}
	return tw.Flush()
}

const clientFew, clientMany = 1000, 5000

var (
	irefs     = regexp.MustCompile(`I\s+refs:\s+([\d,]+)`)
	allocsOut = regexp.MustCompile(`(\d+) allocs/op`)
)

// cachegrind runs bench n times in the test binary bin under cachegrind
// and returns the instructions the process ran, and the allocations per
// op the benchmark reported.
func cachegrind(ctx context.Context, bin, bench string, n int) (int64, string, error) {
	cmd := exec.CommandContext(ctx, "valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
		bin, "-test.run", "^$", "-test.bench", bench, "-test.benchmem", "-test.cpu", "1", "-test.benchtime", strconv.Itoa(n)+"x")
	cmd.Dir = "../../guard/redisstore"
	// (valgrind's signal handling and Go's asynchronous preemption do
	// not mix: the goroutines are preempted at calls instead)
	cmd.Env = append(os.Environ(), "GODEBUG=asyncpreemptoff=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return 0, "", fmt.Errorf("%s under cachegrind: %v\n%s", bench, err, out)
	}
	m := irefs.FindSubmatch(out)
	if m == nil {
		return 0, "", fmt.Errorf("%s: no instruction count in cachegrind's output\n%s", bench, out)
	}
	total, _ := strconv.ParseInt(strings.ReplaceAll(string(m[1]), ",", ""), 10, 64)
	allocs := "—"
	if a := allocsOut.FindSubmatch(out); a != nil {
		allocs = string(a[1])
	}
	return total, allocs, nil
}
