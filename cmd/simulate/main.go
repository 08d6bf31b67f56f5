// Command simulate runs a simulated day of traffic (legitimate users and
// attacks; see internal/sim) through the real guard and API under several
// configurations, side by side, and prints what each attack achieved and
// what real users suffered; it writes a report with charts.
//
//	go run ./cmd/simulate [-config my.yaml] [-seed 1] [-users 100000] [-only default,...] [-out dist/simulate]
package main

import (
	"context"
	_ "embed"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/otpguard/otpguard/config"
	"github.com/otpguard/otpguard/internal/sim"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "simulate:", err)
		os.Exit(1)
	}
}

// previousDefaults are the previous release's default rules.
//
//go:embed previous-defaults.yaml
var previousDefaults []byte

func run() error {
	configPath := flag.String("config", "", "a config (YAML) to compare with the others")
	seed := flag.Uint64("seed", 1, "the generators' seed: the same seed, the same day")
	usersN := flag.Int("users", 100_000, "legitimate users")
	scale := flag.Float64("scale", 1, "attack volume multiplier")
	out := flag.String("out", "dist/simulate", "where the report and charts go")
	only := flag.String("only", "", "the columns to run, comma-separated (default: all)")
	flag.Parse()

	configs, err := columns(*configPath, *only)
	if err != nil {
		return err
	}
	var results []*sim.Result
	began := time.Now()
	for _, c := range configs {
		t0 := time.Now()
		r, err := sim.Run(context.Background(), c.name, c.cfg, sim.Options{Seed: *seed, Users: *usersN, Scale: *scale})
		if err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
		fmt.Fprintf(os.Stderr, "simulated a day under %q in %s (%d requests)\n", c.name, time.Since(t0).Round(100*time.Millisecond), r.Requests)
		results = append(results, r)
	}
	table := sim.Table(results)
	for _, r := range results {
		if len(r.RefusedBy) > 0 {
			fmt.Fprintf(os.Stderr, "%s: legitimate requests refused, by rule: %v\n", r.Config, r.RefusedBy)
		}
	}
	fmt.Printf("one simulated day, seed %d, %d legitimate users (%s)\n\n%s", *seed, *usersN, time.Since(began).Round(time.Second), table)
	return writeReport(*out, *seed, table, results)
}

// named is a configuration and the name of its column.
type named struct {
	name string
	cfg  config.Config
}

// columns are the configurations to simulate: the default rules, with an
// ASN database, the previous release's, none, and path's if it names a
// file; only those only names if it is set.
func columns(path, only string) ([]named, error) {
	previous, err := config.Parse(previousDefaults)
	if err != nil {
		return nil, err
	}
	none, err := config.Parse([]byte("rules: []\n"))
	if err != nil {
		return nil, err
	}
	// The default rules once network.asnDatabase names a database: the
	// simulation's own (see internal/sim).
	withASN, err := config.Parse([]byte("network: {asnDatabase: simulated}\n"))
	if err != nil {
		return nil, err
	}
	configs := []named{{"default", config.Default()}, {"default + ASN db", withASN}, {"previous defaults", previous}, {"no guard", none}}
	if path != "" {
		doc, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		c, err := config.Parse(doc)
		if err != nil {
			return nil, err
		}
		configs = append(configs, named{filepath.Base(path), c})
	}
	if only != "" {
		keep := strings.Split(only, ",")
		configs = slices.DeleteFunc(configs, func(c named) bool { return !slices.Contains(keep, c.name) })
		if len(configs) == 0 {
			return nil, fmt.Errorf("-only %q names no column (default, default + ASN db, previous defaults, no guard, or -config's file name)", only)
		}
	}
	return configs, nil
}

// writeReport writes the report (table, then the charts) to out.
func writeReport(out string, seed uint64, table string, results []*sim.Result) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	files, err := sim.Charts(results, out)
	if err != nil {
		return err
	}
	report := fmt.Sprintf("# otpguard simulation, seed %d\n\n```\n%s```\n\n", seed, table)
	for _, f := range files {
		report += fmt.Sprintf("![%s](%s)\n\n", filepath.Base(f), filepath.Base(f))
	}
	path := filepath.Join(out, "report.md")
	if err := os.WriteFile(path, []byte(report), 0o644); err != nil {
		return err
	}
	fmt.Printf("\nreport: %s\n", path)
	return nil
}
