package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/otpguard/otpguard/guard"
)

// Bounds on a configuration document, checked by [Parse] before it
// decodes or validates anything, wherever the document comes from (the
// GUARD_CONFIG file, the SSM parameter, the console): a document over one
// is refused at once with a [LimitError] naming it.
const (
	// MaxConfigBytes is a document's size: 256 KiB, 45 times the
	// default document (2,000 rules written one a line take 160 KB).
	// What it bounds is the parser's work: the densest YAML of this size
	// (130,000 one-letter list items) is parsed and refused in about
	// half a second on a busy 2-core machine.
	MaxConfigBytes = 256 << 10
	// MaxRules is the length of the rules list (aliases count as the
	// rules they stand for): 80 times the default rules.
	MaxRules = 2000
	// MaxConfigDepth is how deep mappings and lists may nest; the
	// deepest field of the document is at 5.
	MaxConfigDepth = 20
	// maxProblems is how many problems an invalid document reports; the
	// rest are counted.
	maxProblems = 100
)

// LimitError is a document over one of the bounds [Parse] checks
// before it decodes anything.
type LimitError struct {
	// Bound is the bound's name: MaxConfigBytes, MaxRules or
	// MaxConfigDepth.
	Bound string
	// Limit is the bound's value; Got is the document's (bytes, rules,
	// levels).
	Limit, Got int
}

// Error names the bound, its value and the document's.
func (e *LimitError) Error() string {
	switch e.Bound {
	case "MaxConfigBytes":
		return fmt.Sprintf("config: the document is %d bytes; at most %d (config.%s)", e.Got, e.Limit, e.Bound)
	case "MaxRules":
		return fmt.Sprintf("config: rules: %d rules; at most %d (config.%s)", e.Got, e.Limit, e.Bound)
	}
	return fmt.Sprintf("config: the document nests %d levels deep; at most %d (config.%s)", e.Got, e.Limit, e.Bound)
}

// document is the configuration document as it is written: its rules
// in their written form.
type document struct {
	Config `yaml:",inline"`
	Rules  []rule `yaml:"rules"`
}

// Parse reads a configuration document laid over the embedded default,
// fills defaults and validates it. An empty doc gives the default.
// A document over MaxConfigBytes, MaxRules or MaxConfigDepth is refused
// with a *LimitError before anything is decoded from it.
func Parse(doc []byte) (Config, error) {
	if len(doc) > MaxConfigBytes {
		return Config{}, &LimitError{Bound: "MaxConfigBytes", Limit: MaxConfigBytes, Got: len(doc)}
	}
	var d document
	if _, err := decodeRules(defaultYAML, &d); err != nil {
		return Config{}, fmt.Errorf("config: default: %w", err)
	}
	ownRules := false
	if len(bytes.TrimSpace(doc)) > 0 {
		var err error
		if ownRules, err = decodeRules(doc, &d); err != nil {
			if _, ok := err.(*LimitError); ok {
				return Config{}, err
			}
			return Config{}, fmt.Errorf("config: %w", err)
		}
	}
	if !ownRules && d.Network.ASNDatabase == "" {
		// The default rules on the asn dimension apply once an ASN
		// database is configured; a rule of yours on asn without one is
		// an error (validate).
		d.Rules = slices.DeleteFunc(d.Rules, func(r rule) bool { return slices.Contains(r.Key, "asn") || r.Of == "asn" })
	}
	c := d.Config
	c.Rules = make([]guard.Rule, len(d.Rules))
	percent := make([]bool, len(d.Rules))
	for i, r := range d.Rules {
		c.Rules[i], percent[i] = r.engine(), r.percent
	}
	c.fill()
	if err := c.validate(percent); err != nil {
		return Config{}, err
	}
	return c, nil
}

// decodeRules decodes doc over d strictly; a rule's limit may be written
// as a percentage ("80%", the ratio algorithm's), which the document is
// rewritten for first (a custom unmarshaler would lose the strictness).
// It reports whether doc has a rules list (which replaces the rules
// before it as a whole).
func decodeRules(doc []byte, d *document) (bool, error) {
	doc, marks, replaced, err := percents(doc)
	if err != nil {
		return false, err
	}
	if err := decodeStrict(doc, d); err != nil {
		return false, err
	}
	if replaced {
		for i := range d.Rules {
			d.Rules[i].percent = marks[i]
		}
	}
	return replaced, nil
}

// percents rewrites the rule limits of doc written as percentages to
// their numbers, and reports which rules had one and whether doc has a
// rules list at all. A document it cannot read is returned as it is (the
// strict decoding reports what is wrong with it); one over MaxConfigDepth
// or MaxRules is a LimitError.
func percents(doc []byte) (out []byte, marks map[int]bool, hasRules bool, err error) {
	var root yaml.Node
	if err := yaml.Unmarshal(doc, &root); err != nil {
		return doc, nil, false, nil
	}
	if d := nesting(&root, map[*yaml.Node]int{}); d > MaxConfigDepth {
		return doc, nil, false, &LimitError{Bound: "MaxConfigDepth", Limit: MaxConfigDepth, Got: d}
	}
	if len(root.Content) == 0 || root.Content[0].Kind != yaml.MappingNode {
		return doc, nil, false, nil
	}
	top := root.Content[0]
	for i := 0; i+1 < len(top.Content); i += 2 {
		if top.Content[i].Value != "rules" {
			continue
		}
		hasRules = true
		seq := top.Content[i+1]
		if seq.Kind == yaml.AliasNode && seq.Alias != nil {
			seq = seq.Alias
		}
		if seq.Kind != yaml.SequenceNode {
			return doc, nil, true, nil
		}
		if len(seq.Content) > MaxRules {
			return doc, nil, true, &LimitError{Bound: "MaxRules", Limit: MaxRules, Got: len(seq.Content)}
		}
		for k, item := range seq.Content {
			if item.Kind != yaml.MappingNode {
				continue
			}
			for j := 0; j+1 < len(item.Content); j += 2 {
				v := item.Content[j+1]
				if item.Content[j].Value == "limit" && v.Kind == yaml.ScalarNode && strings.HasSuffix(strings.TrimSpace(v.Value), "%") {
					v.Value = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v.Value), "%"))
					v.Tag, v.Style = "", 0
					if marks == nil {
						marks = map[int]bool{}
					}
					marks[k] = true
				}
			}
		}
	}
	if marks == nil {
		return doc, nil, hasRules, nil
	}
	b, merr := yaml.Marshal(&root)
	if merr != nil {
		return doc, nil, hasRules, nil
	}
	return b, marks, hasRules, nil
}

// nesting is how deep mappings and lists nest in n (an alias as deep as
// what it stands for); seen remembers each node's, so that aliases cost
// nothing more.
func nesting(n *yaml.Node, seen map[*yaml.Node]int) int {
	if d, ok := seen[n]; ok {
		return d
	}
	seen[n] = MaxConfigDepth + 1 // a node inside itself (the parser refuses those) is too deep
	d := 0
	switch n.Kind {
	case yaml.AliasNode:
		if n.Alias != nil {
			d = nesting(n.Alias, seen)
		}
	case yaml.DocumentNode, yaml.MappingNode, yaml.SequenceNode:
		for _, c := range n.Content {
			d = max(d, nesting(c, seen))
		}
		if n.Kind != yaml.DocumentNode {
			d++
		}
	}
	seen[n] = d
	return d
}

func decodeStrict(doc []byte, v any) error {
	dec := yaml.NewDecoder(bytes.NewReader(doc))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil && !errors.Is(err, io.EOF) {
		var te *yaml.TypeError
		if errors.As(err, &te) && len(te.Errors) > maxProblems {
			te.Errors = append(te.Errors[:maxProblems], fmt.Sprintf("and %d more", len(te.Errors)-maxProblems))
		}
		return err
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return errors.New("more than one YAML document")
	}
	return nil
}
