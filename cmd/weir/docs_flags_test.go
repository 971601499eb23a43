package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDocumentedFlagsExist: every flag that the README and docs/ pass to
// a weir command, in running text or in an example, is one that command's
// -h lists: a documented command line that the CLI refuses is a procedure
// that fails when an operator needs it.
func TestDocumentedFlagsExist(t *testing.T) {
	t.Parallel()
	defined := map[string]map[string]bool{}
	flagLine := regexp.MustCompile(`(?m)^\s+-([a-z][a-z0-9-]*)`)
	for _, c := range commands {
		var out, errOut bytes.Buffer
		if code := run(context.Background(), []string{c.name, "-h"}, &out, &errOut); code != exitOK {
			t.Fatalf("weir %s -h: exit %d\n%s", c.name, code, errOut.String())
		}
		defined[c.name] = map[string]bool{"h": true}
		for _, m := range flagLine.FindAllStringSubmatch(out.String()+errOut.String(), -1) {
			defined[c.name][m[1]] = true
		}
		if len(defined[c.name]) < 3 {
			t.Fatalf("weir %s -h lists %v: the help's format changed", c.name, defined[c.name])
		}
	}
	files, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	// A command line: "weir <command>" and what follows on the line, up to
	// a back quote; a continued line (a trailing backslash) joins the next.
	cmdLine := regexp.MustCompile("\\bweir ([a-z][a-z-]*)((?:[^`\\n]|\\\\\\n)*)")
	flagUse := regexp.MustCompile(`(?:^|\s)-{1,2}([a-z][a-z0-9-]*)`)
	checked := 0
	for _, file := range append([]string{"../../README.md"}, files...) {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		text := strings.ReplaceAll(string(b), "`\n", "` \n") // a span never runs on past its line's end
		for _, m := range cmdLine.FindAllStringSubmatch(text, -1) {
			flags, ok := defined[m[1]]
			if !ok {
				continue // prose ("weir checks ..."), not a command
			}
			for _, f := range flagUse.FindAllStringSubmatch(m[2], -1) {
				checked++
				if !flags[f[1]] {
					t.Errorf("%s: `weir %s%s` passes -%s, which weir %s -h does not list", filepath.Base(file), m[1], strings.TrimRight(m[2], " "), f[1], m[1])
				}
			}
		}
	}
	if checked < 10 {
		t.Fatalf("checked only %d flags in the docs: the pattern no longer finds the command lines", checked)
	}
}
