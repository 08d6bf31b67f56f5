package sim

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/otpguard/otpguard/internal/svgchart"
)

// Table renders results side by side: per attack, what succeeded (and
// its share of the attack's attempts or targets); then the legitimate
// users' friction.
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
		attackRows(row, a)
	}
	row("attackers' CAPTCHAs bought ($2 per 1000)", func(r *Result) string {
		n := 0
		for _, a := range r.Attacks {
			n += a.Captchas
		}
		return fmt.Sprintf("%d ($%.2f)", n, float64(n)*captchaPrice)
	})
	userRows(row)
	_ = tw.Flush()
	return b.String()
}

// rowFunc adds a row to a table: label, then f of each result.
type rowFunc func(label string, f func(r *Result) string)

// attackUnits is what each attack's success is counted in (the stuffing
// attacks: accounts taken).
var attackUnits = map[string]string{Pumping: "SMS delivered", PumpingCognito: "SMS delivered", Bombing: "victim emails", BruteForce: "codes guessed",
	Spraying: "accounts taken"}

// attackRows adds attack a's rows: what succeeded, then its cost or the
// victims still served.
func attackRows(row rowFunc, a string) {
	if a == LockoutDoS {
		row("lockout-DoS: victims with a device token in at first try", func(r *Result) string { return pct(r.VictimsFirstTry, r.Victims) })
		row("  victims without one, on a new network, in at once or by step-up", func(r *Result) string {
			return pct(r.VictimsNoTokenIn, r.VictimsNoToken)
		})
		return
	}
	unit := attackUnits[a]
	if unit == "" {
		unit = "accounts taken" // the stuffing attacks
	}
	row(fmt.Sprintf("%s: %s", a, unit), func(r *Result) string {
		s := r.Attacks[a]
		of := s.Targets
		if of == 0 {
			of = s.Attempts
		}
		return fmt.Sprintf("%d of %d (%.2f%%)", s.Succeeded, of, 100*s.Rate())
	})
	switch a {
	case BruteForce:
		row("  guesses checked", func(r *Result) string { return fmt.Sprintf("%d", r.Attacks[a].Admitted-144) })
	case Pumping, PumpingCognito:
		row("  SMS cost", func(r *Result) string { return fmt.Sprintf("$%.2f", r.Attacks[a].Cost) })
	default:
		if unit == "accounts taken" {
			row("  right passwords it could not use (step-up)", func(r *Result) string { return fmt.Sprintf("%d", r.Attacks[a].Challenged) })
			row("  its cost per account taken", func(r *Result) string { return perTaken(r.Attacks[a]) })
		}
	}
}

// userRows adds the legitimate users' rows: their friction.
func userRows(row rowFunc) {
	row("legitimate users", func(r *Result) string { return fmt.Sprintf("%d", r.Users) })
	row("  logins challenged (step-up)", func(r *Result) string { return pct(r.Challenged, r.Logins) + " of logins" })
	row("    of accounts under attack", func(r *Result) string { return fmt.Sprintf("%d", r.ChallengedAttacked) })
	row("  challenges answered, abandoned", func(r *Result) string { return fmt.Sprintf("%d, %d", r.Passed, r.Abandoned) })
	row("  refused at their first try", func(r *Result) string { return pct(r.RefusedFirst, r.Users) })
	row("  of quiet networks (households, small offices), refused", func(r *Result) string { return pct(r.QuietRefused, r.QuietUsers) })
	row("  refused at least once", func(r *Result) string { return pct(r.RefusedOnce, r.Users) })
	row("  tasks given up", func(r *Result) string { return fmt.Sprintf("%d", r.GaveUp) })
	row("  median extra wait", func(r *Result) string { return r.MedianWait().Round(time.Second).String() })
	row("requests", func(r *Result) string { return fmt.Sprintf("%d", r.Requests) })
}

// perTaken is what an attack spent per account it took: requests,
// networks and CAPTCHA dollars; all of it when it took none.
func perTaken(s *AttackStats) string {
	if s.Succeeded == 0 {
		return fmt.Sprintf("none taken for %d requests, %d networks, $%.2f", s.Attempts, s.Networks, float64(s.Captchas)*captchaPrice)
	}
	n := float64(s.Succeeded)
	return fmt.Sprintf("%.0f requests, %.1f networks, $%.2f", float64(s.Attempts)/n, float64(s.Networks)/n, float64(s.Captchas)*captchaPrice/n)
}

func pct(n, of int) string {
	if of == 0 {
		return "0"
	}
	return fmt.Sprintf("%d (%.3f%%)", n, 100*float64(n)/float64(of))
}

// Charts writes two SVG line charts into dir: attack requests admitted,
// and legitimate requests refused, per hour of the day, per config.
func Charts(results []*Result, dir string) ([]string, error) {
	var files []string
	for i, svg := range ChartSVGs(results) {
		path := filepath.Join(dir, []string{"attack-admitted.svg", "users-refused.svg"}[i])
		if err := os.WriteFile(path, []byte(svg), 0o644); err != nil {
			return nil, err
		}
		files = append(files, path)
	}
	return files, nil
}

// ChartSVGs are Charts' two charts as SVG documents.
func ChartSVGs(results []*Result) []string {
	hours := make([]string, 24)
	for h := range hours {
		hours[h] = fmt.Sprint(h)
	}
	var out []string
	for _, c := range []struct {
		title  string
		series func(r *Result) [24]int
	}{
		{"attack requests admitted per hour", func(r *Result) [24]int { return r.AttackAdmitted }},
		{"legitimate requests refused per hour", func(r *Result) [24]int { return r.UsersRefused }},
	} {
		ch := svgchart.Chart{Title: c.title, XLabels: hours, XTitle: "hour of the day", YTitle: "requests", Width: 560, Height: 300}
		for _, r := range results {
			s := c.series(r)
			v := make([]float64, 24)
			for h := range 24 {
				v[h] = float64(s[h])
			}
			ch.Series = append(ch.Series, svgchart.Series{Label: r.Config, Values: v})
		}
		out = append(out, ch.SVG())
	}
	return out
}
