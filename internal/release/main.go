// Command release versions weir's published modules together, and proves
// a version installs the way users install it.
//
// weir publishes three modules that require each other: the library
// (github.com/weirstream/weir), the test kit
// (github.com/weirstream/weir/weirtest/kafka) and the CLI
// (github.com/weirstream/weir/cmd/weir). Their go.mod files carry no
// replace; the workspace (go.work) builds them against the working tree.
//
//	release -bump v0.N.M     set every cross-module requirement to v0.N.M,
//	                         with its go.sum lines, and the workspace's
//	                         replacements (make release; it then commits
//	                         and tags)
//	release -verify v0.N.M   serve the working tree as a module proxy at
//	                         v0.N.M, then, with an empty module cache and
//	                         no workspace, go install the CLI and build a
//	                         new service module that go gets weir and the
//	                         test kit and runs its tests (make
//	                         verify-install)
//
// It is a module of its own, outside the workspace (its dependency on
// golang.org/x/mod must not move the workspace's versions): run it from
// its directory with GOWORK=off, as the Makefile does.
package main

import (
	"flag"
	"fmt"
	"os"
)

func main() {
	bump := flag.String("bump", "", "set the cross-module requirements to this version")
	verify := flag.String("verify", "", "serve the tree as a module proxy at this version and install from it")
	keep := flag.Bool("keep", false, "with -verify: keep the proxy, module cache and service in the temporary directory")
	root := flag.String("root", "../..", "the repository's root")
	flag.Parse()
	var err error
	switch {
	case *bump != "" && *verify == "":
		err = bumpTree(*root, *bump)
	case *verify != "" && *bump == "":
		err = verifyInstall(*root, *verify, *keep)
	default:
		flag.Usage()
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}
