package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/mod/module"
)

// verifyInstall serves the tree at root as a module proxy at version and
// installs from it as a user would: no workspace, an empty module cache,
// third-party modules from the usual proxy.
func verifyInstall(root, version string, keep bool) error {
	tmp, err := os.MkdirTemp("", "weir-verify-install-")
	if err != nil {
		return err
	}
	if keep {
		fmt.Println("release: working in", tmp)
	} else {
		defer os.RemoveAll(tmp)
	}
	tree := filepath.Join(tmp, "tree")
	if err := copyTree(root, tree); err != nil {
		return err
	}
	if _, err := bump(tree, version); err != nil {
		return err
	}
	proxy := filepath.Join(tmp, "proxy")
	for _, m := range modules {
		if err := serve(proxy, filepath.Join(tree, m.dir), m.path, version); err != nil {
			return err
		}
	}
	goBin, err := toolchainGo()
	if err != nil {
		return err
	}
	env := append(os.Environ(),
		"GOTOOLCHAIN=local", "GOWORK=off", "GOFLAGS=-mod=mod -modcacherw",
		"GOMODCACHE="+filepath.Join(tmp, "modcache"), "GOPATH="+filepath.Join(tmp, "gopath"), "GOBIN="+filepath.Join(tmp, "bin"),
		"GOPROXY=file://"+filepath.ToSlash(proxy)+",https://proxy.golang.org",
		// The candidate is not in the checksum database; everything else
		// is checked against it as usual.
		"GONOSUMDB=github.com/weirstream/weir",
	)
	run := func(dir string, args ...string) (string, error) {
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Dir, cmd.Env = dir, env
		out, err := cmd.CombinedOutput()
		if err != nil {
			return string(out), fmt.Errorf("%s (in %s): %w\n%s", strings.Join(args, " "), dir, err, out)
		}
		return string(out), nil
	}

	started := time.Now()
	if _, err := run(tmp, goBin, "install", "github.com/weirstream/weir/cmd/weir@"+version); err != nil {
		return err
	}
	out, err := run(tmp, filepath.Join(tmp, "bin", "weir"), "-h")
	if err != nil || !strings.Contains(out, "usage: weir") {
		return fmt.Errorf("the installed weir -h: %v\n%s", err, out)
	}
	fmt.Printf("release: go install github.com/weirstream/weir/cmd/weir@%s: ok (%v)\n", version, time.Since(started).Round(time.Second))

	started = time.Now()
	svc := filepath.Join(tmp, "svc")
	if err := writeService(svc); err != nil {
		return err
	}
	for _, args := range [][]string{
		{goBin, "get", "github.com/weirstream/weir@" + version, "github.com/weirstream/weir/weirtest/kafka@" + version},
		{goBin, "mod", "tidy"},
		{goBin, "vet", "./..."},
		{goBin, "test", "-count=1", "./..."},
	} {
		if out, err = run(svc, args...); err != nil {
			return err
		}
	}
	fmt.Printf("release: a new service module on weir@%s and weirtest/kafka@%s: %s(%v)\n", version, version, out, time.Since(started).Round(time.Second))
	return nil
}

// serve writes the module path in dir, at version, into the file proxy
// at proxy: @v/list, .info, .mod and .zip, as GOPROXY=file:// reads them.
func serve(proxy, dir, path, version string) error {
	zipBytes, modBytes, err := moduleZip(dir, path, version)
	if err != nil {
		return err
	}
	escaped, err := module.EscapePath(path)
	if err != nil {
		return err
	}
	ev, err := module.EscapeVersion(version)
	if err != nil {
		return err
	}
	at := filepath.Join(proxy, filepath.FromSlash(escaped), "@v")
	if err := os.MkdirAll(at, 0o755); err != nil {
		return err
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, time.Now().UTC()})
	if err != nil {
		return err
	}
	for name, data := range map[string][]byte{"list": []byte(version + "\n"), ev + ".info": info, ev + ".mod": modBytes, ev + ".zip": zipBytes} {
		if err := os.WriteFile(filepath.Join(at, name), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// toolchainGo returns the go command of the toolchain running this
// program's build (GOTOOLCHAIN may have switched to it), so that the
// empty module cache need not download it again.
func toolchainGo() (string, error) {
	out, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOROOT: %w", err)
	}
	return filepath.Join(strings.TrimSpace(string(out)), "bin", "go"), nil
}

// writeService writes a new service module at dir: a topology, a unit
// test on weirtest's driver, and a test on weirtest/kafka's embedded
// broker.
func writeService(dir string) error {
	files := map[string]string{
		"go.mod": "module example.com/svc\n\ngo 1.27\n",
		"svc.go": `// Package svc upper-cases every value of its input topic.
package svc

import (
	"strings"

	"github.com/weirstream/weir/processor"
	"github.com/weirstream/weir/serde"
)

// Topology copies in to out, upper-casing each value.
func Topology(in, out string) *processor.Topology {
	t := processor.NewTopology()
	src := t.AddSource("in", in, serde.String(), serde.String())
	up := t.AddProcessor("upper", processor.Func(func(ctx processor.Context[string, string], r processor.Record[string, string]) error {
		r.Value = strings.ToUpper(r.Value)
		return ctx.Forward(r)
	}), src)
	t.AddSink("out", out, serde.String(), serde.String(), up)
	return t
}
`,
		"svc_test.go": `package svc

import (
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/serde"
	"github.com/weirstream/weir/weirtest"
	"github.com/weirstream/weir/weirtest/kafka"
)

func TestUpperOnTheDriver(t *testing.T) {
	d, err := weirtest.New(Topology("in", "out"), weirtest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := weirtest.Input(d, "in", serde.String(), serde.String()).Pipe("k", "hello", time.UnixMilli(0)); err != nil {
		t.Fatal(err)
	}
	got, err := weirtest.Output(d, "out", serde.String(), serde.String()).ReadAll()
	if err != nil || len(got) != 1 || got[0].Key != "k" || got[0].Value != "HELLO" {
		t.Fatalf("out = %+v, %v; want k=HELLO", got, err)
	}
}

func TestUpperOnTheEmbeddedBroker(t *testing.T) {
	c := kafka.Embedded(t, 1, "in", "out")
	app, err := weir.New(Topology("in", "out"), weir.Config{ApplicationID: c.Name(t, "svc"), Brokers: c.Brokers, StateDir: t.TempDir(), Guarantee: weir.AtLeastOnce})
	if err != nil {
		t.Fatal(err)
	}
	kafka.Run(t, app)
	kafka.Produce(t, c, &sarama.ProducerMessage{Topic: "in", Key: sarama.StringEncoder("k"), Value: sarama.StringEncoder("hello")})
	got := kafka.ReadAll(t, c, "out", sarama.ReadUncommitted, func(got []*sarama.ConsumerMessage) bool { return len(got) == 1 })
	if string(got[0].Value) != "HELLO" {
		t.Fatalf("out = %q, want HELLO", got[0].Value)
	}
}
`,
	}
	for name, text := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			return err
		}
	}
	return nil
}
