package sim

import (
	"fmt"
	"image/color"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// Table renders results side by side: per attack, what succeeded (and the
// share of attempts); then the legitimate users' friction.
func Table(results []*Result) string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "\t")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t", r.Config)
	}
	fmt.Fprintln(tw)
	row := func(label string, f func(r *Result) string) {
		fmt.Fprintf(tw, "%s\t", label)
		for _, r := range results {
			fmt.Fprintf(tw, "%s\t", f(r))
		}
		fmt.Fprintln(tw)
	}
	for _, a := range Attacks {
		unit := map[string]string{Pumping: "SMS delivered", Bombing: "victim emails", BruteForce: "codes guessed",
			StuffFast: "accounts taken", StuffSlow: "accounts taken", Spraying: "accounts taken"}[a]
		row(fmt.Sprintf("%s: %s", a, unit), func(r *Result) string {
			s := r.Attacks[a]
			return fmt.Sprintf("%d of %d (%.2f%%)", s.Succeeded, s.Attempts, 100*s.Rate())
		})
		if a == BruteForce {
			row("  guesses checked", func(r *Result) string { return fmt.Sprintf("%d", r.Attacks[a].Admitted-144) })
		}
		if a == Pumping {
			row("  SMS cost", func(r *Result) string { return fmt.Sprintf("$%.2f", r.Attacks[a].Cost) })
		}
	}
	row("legitimate users", func(r *Result) string { return fmt.Sprintf("%d", r.Users) })
	row("  refused at least once", func(r *Result) string { return pct(r.RefusedOnce, r.Users) })
	row("  refused at their first try", func(r *Result) string { return pct(r.RefusedFirst, r.Users) })
	row("  tasks given up", func(r *Result) string { return fmt.Sprintf("%d", r.GaveUp) })
	row("  median extra wait", func(r *Result) string { return r.MedianWait().Round(time.Second).String() })
	_ = tw.Flush()
	return b.String()
}

func pct(n, of int) string {
	if of == 0 {
		return "0"
	}
	return fmt.Sprintf("%d (%.2f%%)", n, 100*float64(n)/float64(of))
}

// Charts writes two SVG line charts into dir: attack requests admitted,
// and legitimate requests refused, per hour of the day, per config.
func Charts(results []*Result, dir string) ([]string, error) {
	var files []string
	for _, c := range []struct {
		name, title string
		series      func(r *Result) [24]int
	}{
		{"attack-admitted.svg", "attack requests admitted per hour", func(r *Result) [24]int { return r.AttackAdmitted }},
		{"users-refused.svg", "legitimate requests refused per hour", func(r *Result) [24]int { return r.UsersRefused }},
	} {
		p := plot.New()
		p.Title.Text = c.title
		p.X.Label.Text = "hour of the day"
		p.Y.Label.Text = "requests"
		for i, r := range results {
			s := c.series(r)
			pts := make(plotter.XYs, 24)
			for h := range 24 {
				pts[h].X, pts[h].Y = float64(h), float64(s[h])
			}
			l, err := plotter.NewLine(pts)
			if err != nil {
				return nil, err
			}
			l.Color = plotutil.Color(i)
			l.Dashes = plotutil.Dashes(i)
			l.Width = vg.Points(1.5)
			p.Add(l)
			p.Legend.Add(r.Config, l)
		}
		p.Legend.Top = true
		p.BackgroundColor = color.White
		path := filepath.Join(dir, c.name)
		if err := p.Save(7*vg.Inch, 4*vg.Inch, path); err != nil {
			return nil, err
		}
		files = append(files, path)
	}
	return files, nil
}
