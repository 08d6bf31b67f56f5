package main

import (
	"strings"
	"testing"
)

func TestLuaMutants(t *testing.T) {
	src := `-- a comment: a + b <= c
local function f(op, n)
  if op.c + n <= op.limit then return 'a <= b' end -- c > d
  redis.call('SET', op.key, n, 'PX', ms(op.window))
  redis.call('SET', k, '1', 'NX', 'PX', args[2])
  redis.call('PEXPIRE', op.key, ms(op.window))
  return fmt(n) .. 'x'
end`
	got := map[string]bool{}
	for _, m := range luaMutants(src) {
		got[m.kind+" | "+strings.TrimSpace(m.to)] = true
		if m.line == 1 {
			t.Errorf("a comment mutated: %+v", m)
		}
	}
	for _, want := range []string{
		"arithmetic + → - | if op.c - n <= op.limit then return 'a <= b' end -- c > d",
		"comparison <= → < | if op.c + n < op.limit then return 'a <= b' end -- c > d",
		"drop PX | redis.call('SET', op.key, n)",
		"drop NX | redis.call('SET', k, '1', 'PX', args[2])",
		"drop PX | redis.call('SET', k, '1', 'NX')",
		"drop PEXPIRE | -- (PEXPIRE dropped)",
		"off by one 2 → 3 | redis.call('SET', k, '1', 'NX', 'PX', args[3])",
	} {
		if !got[want] {
			t.Errorf("missing %q", want)
		}
	}
	for k := range got {
		if strings.Contains(k, "'a < b'") || strings.Contains(k, "'a <= b'") && strings.HasPrefix(k, "comparison") && strings.Contains(k, "c >= d") {
			t.Errorf("a string or a comment mutated: %q", k)
		}
		if strings.Contains(k, "'1'") && strings.HasPrefix(k, "off by one 1") {
			t.Errorf("a number in a string mutated: %q", k)
		}
	}
}
