package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	"golang.org/x/mod/sumdb/dirhash"
	modzip "golang.org/x/mod/zip"
)

// published is a module users install, in dependency order: each
// requires only those before it.
type published struct {
	path string
	dir  string // relative to the repository's root
}

var modules = []published{
	{"github.com/weirstream/weir", "."},
	{"github.com/weirstream/weir/weirtest/kafka", "weirtest/kafka"},
	{"github.com/weirstream/weir/cmd/weir", "cmd/weir"},
}

// sums are a module version's go.sum hashes: its zip's and its go.mod's.
type sums struct{ zip, mod string }

// bumpTree sets, in every go.mod of the repository at root, each
// requirement of a published module to version, gives the published
// modules the go.sum lines of those versions (hashed from the tree, as
// the tag will serve them), and moves go.work's replacements to version.
// It returns the hashes of each published module at version.
func bumpTree(root, version string) error {
	_, err := bump(root, version)
	return err
}

func bump(root, version string) (map[string]sums, error) {
	if !semver.IsValid(version) || semver.Build(version) != "" {
		return nil, fmt.Errorf("version %q: want a semantic version such as v0.4.0 or v0.4.0-rc.1", version)
	}
	mods, err := filepath.Glob(filepath.Join(root, "*/go.mod"))
	if err != nil {
		return nil, err
	}
	deeper, err := filepath.Glob(filepath.Join(root, "*/*/go.mod"))
	if err != nil {
		return nil, err
	}
	mods = append(mods, deeper...)
	isPublished := func(path string) bool {
		return slices.ContainsFunc(modules, func(p published) bool { return p.path == path })
	}
	// Every module of the workspace: its requirements of published modules.
	for _, gomod := range mods {
		if _, err := editGoMod(gomod, func(f *modfile.File) error {
			for _, r := range f.Require {
				if isPublished(r.Mod.Path) {
					if err := f.AddRequire(r.Mod.Path, version); err != nil {
						return err
					}
				}
			}
			for _, r := range f.Replace {
				if isPublished(r.Old.Path) {
					return fmt.Errorf("%s replaces %s: published modules require released versions, the workspace (go.work) builds them against the tree", gomod, r.Old.Path)
				}
			}
			return nil
		}); err != nil {
			return nil, err
		}
	}
	// The published modules, in order: each one's go.sum gets the lines of
	// those before it, then it is hashed as the tag will serve it.
	hashes := map[string]sums{}
	for _, m := range modules {
		dir := filepath.Join(root, m.dir)
		f, err := editGoMod(filepath.Join(dir, "go.mod"), func(*modfile.File) error { return nil })
		if err != nil {
			return nil, err
		}
		var lines []string
		for _, r := range f.Require {
			if h, ok := hashes[r.Mod.Path]; ok {
				lines = append(lines, fmt.Sprintf("%s %s %s", r.Mod.Path, version, h.zip), fmt.Sprintf("%s %s/go.mod %s", r.Mod.Path, version, h.mod))
			}
		}
		if err := setSums(filepath.Join(dir, "go.sum"), lines, hashes); err != nil {
			return nil, err
		}
		zipBytes, modBytes, err := moduleZip(dir, m.path, version)
		if err != nil {
			return nil, err
		}
		h, err := hash(zipBytes, modBytes)
		if err != nil {
			return nil, err
		}
		hashes[m.path] = h
	}
	return hashes, setWorkReplacements(filepath.Join(root, "go.work"), version)
}

// editGoMod applies edit to a go.mod file, writes it back formatted, and
// returns it.
func editGoMod(path string, edit func(*modfile.File) error) (*modfile.File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	f, err := modfile.Parse(path, data, nil)
	if err != nil {
		return nil, err
	}
	if err := edit(f); err != nil {
		return nil, err
	}
	f.Cleanup()
	out, err := f.Format()
	if err != nil {
		return nil, err
	}
	return f, os.WriteFile(path, out, 0o644)
}

// setSums replaces, in a go.sum file, the lines of the published modules
// (of any version) with lines.
func setSums(path string, lines []string, published map[string]sums) error {
	data, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	var kept []string
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		fields := strings.Fields(l)
		if len(fields) == 0 {
			continue
		}
		if _, ours := published[fields[0]]; ours || strings.HasPrefix(fields[0], "github.com/weirstream/weir") {
			continue
		}
		kept = append(kept, l)
	}
	kept = append(kept, lines...)
	slices.Sort(kept)
	return os.WriteFile(path, []byte(strings.Join(kept, "\n")+"\n"), 0o644)
}

// setWorkReplacements points go.work's replacements of the published
// modules at version (the tree serves every version the modules require).
func setWorkReplacements(path, version string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	w, err := modfile.ParseWork(path, data, nil)
	if err != nil {
		return err
	}
	type repl struct{ oldVersion, newPath, newVersion string }
	found := map[string]repl{}
	for _, r := range w.Replace {
		found[r.Old.Path] = repl{r.Old.Version, r.New.Path, r.New.Version}
	}
	for _, m := range modules {
		r, ok := found[m.path]
		if !ok {
			continue
		}
		if err := w.DropReplace(m.path, r.oldVersion); err != nil {
			return err
		}
		if err := w.AddReplace(m.path, version, r.newPath, r.newVersion); err != nil {
			return err
		}
	}
	w.Cleanup()
	return os.WriteFile(path, modfile.Format(w.Syntax), 0o644)
}

// moduleZip returns the module zip of the module path in dir at version,
// as a module proxy serves it (nested modules, VCS directories and
// vendor/ left out, as the go command leaves them), and its go.mod.
func moduleZip(dir, path, version string) (zipBytes, modBytes []byte, err error) {
	var buf bytes.Buffer
	if err := modzip.CreateFromDir(&buf, module.Version{Path: path, Version: version}, dir); err != nil {
		return nil, nil, fmt.Errorf("zipping %s@%s from %s: %w", path, version, dir, err)
	}
	modBytes, err = os.ReadFile(filepath.Join(dir, "go.mod"))
	return buf.Bytes(), modBytes, err
}

// hash returns the go.sum hashes of a module zip and its go.mod.
func hash(zipBytes, modBytes []byte) (sums, error) {
	tmp, err := os.CreateTemp("", "weir-release-*.zip")
	if err != nil {
		return sums{}, err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(zipBytes); err != nil {
		tmp.Close()
		return sums{}, err
	}
	if err := tmp.Close(); err != nil {
		return sums{}, err
	}
	zh, err := dirhash.HashZip(tmp.Name(), dirhash.Hash1)
	if err != nil {
		return sums{}, err
	}
	mh, err := dirhash.Hash1([]string{"go.mod"}, func(string) (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(modBytes)), nil
	})
	return sums{zip: zh, mod: mh}, err
}

// copyTree copies the repository's files at root (those git tracks, and
// new ones it does not ignore) to dst.
func copyTree(root, dst string) error {
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("listing the tree's files: %w", err)
	}
	for _, name := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		if name == "" {
			continue
		}
		src := filepath.Join(root, name)
		info, err := os.Lstat(src)
		if errors.Is(err, os.ErrNotExist) {
			continue // deleted in the working tree
		}
		if err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			continue
		}
		data, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, name)
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(target, data, info.Mode().Perm()); err != nil {
			return err
		}
	}
	return nil
}
