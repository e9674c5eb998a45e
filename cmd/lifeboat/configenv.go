package main

import (
	"fmt"
	"slices"
	"strings"
)

// otherEnv are the LIFEBOAT_* variables that are not settings: the
// configuration file's, and those of lifeboat's tests, benchmarks and
// scripts (the e2e tests' binary, bench inputs, build scripts). This is
// the one list: any other LIFEBOAT_* variable that is no option's
// (optionTable) is a mistake, warned of in every command and refused by
// config check.
var otherEnv = []string{
	"LIFEBOAT_CONFIG",             // the configuration file (--config)
	"LIFEBOAT_BIN",                // tests and make test: the binary under test
	"LIFEBOAT_BUILD_SRC",          // scripts/build-lib.sh
	"LIFEBOAT_PROP_SEED",          // restore's property test
	"LIFEBOAT_INSPECT_OBJECTS",    // inspect's benchmark
	"LIFEBOAT_KUBEADM_KILL_AFTER", // restore --kubeadm's crash tests on a real node
}

// otherEnvPrefixes are families of variables of otherEnv's kind.
var otherEnvPrefixes = []string{
	"LIFEBOAT_BENCH_",  // benchmarks (docs/benchmarks.md)
	"LIFEBOAT_REPLAY_", // replay benchmarks
	"LIFEBOAT_TEST_",   // tests re-running themselves in a child
}

// envMistake is a LIFEBOAT_* variable that is no setting, and the
// setting's variable it may have meant ("" when none is near).
type envMistake struct{ name, meant string }

// warning is the mistake as a warning: the variable is ignored.
func (m envMistake) warning() string {
	s := "environment " + m.name + " is not a lifeboat setting (ignored)"
	if m.meant != "" {
		s += "; did you mean " + m.meant + "?"
	}
	return s
}

// String is the mistake as an error (config check).
func (m envMistake) String() string {
	s := "environment " + m.name + " is not a lifeboat setting"
	if m.meant != "" {
		s += "; did you mean " + m.meant + "?"
	}
	return s
}

// unknownEnv are the LIFEBOAT_* variables of environ (NAME=value) that
// are neither an option's nor in otherEnv, sorted by name.
func unknownEnv(environ []string) []envMistake {
	known := map[string]bool{}
	var names []string
	for i := range optionTable {
		for _, n := range optionTable[i].envNames() {
			if strings.HasPrefix(n, "LIFEBOAT_") {
				known[n] = true
				names = append(names, n)
			}
		}
	}
	for _, n := range otherEnv {
		known[n] = true
	}
	var out []envMistake
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "LIFEBOAT_") || known[name] ||
			slices.ContainsFunc(otherEnvPrefixes, func(p string) bool { return strings.HasPrefix(name, p) }) {
			continue
		}
		meant := nearest(strings.TrimPrefix(name, "LIFEBOAT_"), names, func(s string) string { return strings.TrimPrefix(s, "LIFEBOAT_") })
		out = append(out, envMistake{name: name, meant: meant})
	}
	slices.SortFunc(out, func(a, b envMistake) int { return strings.Compare(a.name, b.name) })
	return slices.CompactFunc(out, func(a, b envMistake) bool { return a.name == b.name })
}

// checkEnv reports the unknown LIFEBOAT_* variables: as one error when
// strict (config check), else as warnings on the app's stderr, once.
func (a *app) checkEnv(strict bool) error {
	if a.environ == nil {
		return nil // an app built by a test without an environment
	}
	mistakes := unknownEnv(a.environ())
	if strict && len(mistakes) > 0 {
		var s []string
		for _, m := range mistakes {
			s = append(s, m.String())
		}
		return &ConfigError{Err: fmt.Errorf("%s", strings.Join(s, "; "))}
	}
	if a.envWarned {
		return nil
	}
	a.envWarned = true
	for _, m := range mistakes {
		fmt.Fprintln(a.stderr, "WARNING: "+m.warning())
	}
	return nil
}
