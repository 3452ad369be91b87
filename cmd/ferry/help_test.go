package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// Every command's --help shows an example, and every leaf command runs
// something.
func TestHelpHasExamples(t *testing.T) {
	a := &app{}
	var walk func(c *cobra.Command)
	n := 0
	walk = func(c *cobra.Command) {
		if c.Hidden || c.Name() == "help" || c.Name() == "completion" {
			return
		}
		n++
		if strings.TrimSpace(c.Example) == "" {
			t.Errorf("%q has no example in --help", c.CommandPath())
		}
		if !c.HasSubCommands() && c.RunE == nil {
			t.Errorf("%q runs nothing", c.CommandPath())
		}
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(a.root())
	if n < 18 {
		t.Errorf("walked %d commands, want the 18 of the tree", n)
	}
	var out bytes.Buffer
	if code := run([]string{"dlq", "replay", "--help"}, nil, &out, &out); code != 0 || !strings.Contains(out.String(), "Examples:\n  ferry dlq replay") {
		t.Errorf("ferry dlq replay --help: exit %d\n%s", code, out.String())
	}
}
