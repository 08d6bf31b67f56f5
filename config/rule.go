package config

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/otpguard/otpguard/guard"
	"github.com/otpguard/otpguard/guard/store"
)

// rule is a guard.Rule as the document writes it: the fields guard.Rule
// leaves untagged are read here, from their written forms.
type rule struct {
	guard.Rule `yaml:",inline"`
	// Overage is written "10%" or 0.1.
	Overage Percent `yaml:"overage"`
	// When's values are one name or a list of names.
	When map[string]StringList `yaml:"when"`
	// Elastic's ratio is written "20%" or 0.2.
	Elastic *elastic `yaml:"elastic"`

	percent bool // Limit was written as a percentage
}

// elastic is a guard.Elastic as the document writes it.
type elastic struct {
	Ratio Percent `yaml:"ratio"`
}

// engine is the rule as the engine runs it.
func (r rule) engine() guard.Rule {
	g := r.Rule
	g.Overage = float64(r.Overage)
	g.When = nil
	if r.When != nil {
		g.When = make(map[string][]string, len(r.When))
		for k, vs := range r.When {
			g.When[k] = vs
		}
	}
	g.Elastic = nil
	if r.Elastic != nil {
		g.Elastic = &guard.Elastic{Ratio: float64(r.Elastic.Ratio)}
	}
	return g
}

// written is g as the document writes it; a ratio's limit is a
// percentage.
func written(g guard.Rule) rule {
	r := rule{Rule: g, Overage: Percent(g.Overage), percent: g.Algorithm == store.Ratio}
	if g.When != nil {
		r.When = make(map[string]StringList, len(g.When))
		for k, vs := range g.When {
			r.When[k] = vs
		}
	}
	if g.Elastic != nil {
		r.Elastic = &elastic{Ratio: Percent(g.Elastic.Ratio)}
	}
	return r
}

// MarshalYAML writes a rule back as it was read (a ratio's limit with
// its percent sign).
func (r rule) MarshalYAML() (any, error) {
	type plain rule
	var n yaml.Node
	if err := n.Encode(plain(r)); err != nil {
		return nil, err
	}
	if r.percent {
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == "limit" {
				n.Content[i+1].Value += "%"
				n.Content[i+1].Tag = "!!str"
			}
		}
	}
	return &n, nil
}

// MarshalRules writes rules as a document's rules list, as [Parse] reads
// them back: a ratio's limit with its percent sign.
func MarshalRules(rules []guard.Rule) ([]byte, error) {
	out := make([]rule, len(rules))
	for i, g := range rules {
		out[i] = written(g)
	}
	return yaml.Marshal(out)
}

// Percent is a fraction written as "10%" or 0.1.
type Percent float64

// UnmarshalYAML accepts "10%" and plain numbers.
func (p *Percent) UnmarshalYAML(n *yaml.Node) error {
	s := strings.TrimSpace(n.Value)
	div := 1.0
	if strings.HasSuffix(s, "%") {
		s, div = strings.TrimSuffix(s, "%"), 100
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return fmt.Errorf("line %d: %q is not a percentage", n.Line, n.Value)
	}
	*p = Percent(f / div)
	return nil
}

// StringList is a list that may be written as a single scalar.
type StringList []string

// UnmarshalYAML accepts a scalar or a sequence of scalars.
func (l *StringList) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		*l = StringList{n.Value}
		return nil
	}
	var s []string
	if err := n.Decode(&s); err != nil {
		return err
	}
	*l = s
	return nil
}
