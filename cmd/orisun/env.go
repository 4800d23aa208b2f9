package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kelseyhightower/envconfig"
	"github.com/spf13/cobra"

	"github.com/orisun-io/orisun"
)

// parseEnv sets each field of cfg whose ORISUN_* variable is set, one
// variable at a time with envconfig (so each is read as envconfig reads
// it), and reports every value that is not of its field's kind, in the
// voice of Config.Validate: the variable, the value (never a secret's),
// what is allowed and the fix.
func parseEnv(cfg *orisun.Config) error {
	v := reflect.ValueOf(cfg).Elem()
	vars := map[string]variable{}
	for _, vr := range variables() {
		vars[vr.Name] = vr
	}
	var problems []error
	for i := range v.NumField() {
		f := v.Type().Field(i)
		tag := f.Tag.Get("envconfig")
		if tag == "" {
			continue
		}
		name := "ORISUN_" + tag
		raw, set := os.LookupEnv(name)
		if !set {
			continue
		}
		// A struct of this one field, holding its default: envconfig
		// replaces it with the variable's value.
		one := reflect.New(reflect.StructOf([]reflect.StructField{{Name: f.Name, Type: f.Type, Tag: f.Tag}}))
		one.Elem().Field(0).Set(v.Field(i))
		if err := envconfig.Process("ORISUN", one.Interface()); err != nil {
			problems = append(problems, parseProblem(vars[name], raw, f.Type))
			continue
		}
		v.Field(i).Set(one.Elem().Field(0))
	}
	return errors.Join(problems...)
}

// parseProblem says what is wrong with a value of v that is not of its
// field's kind, and the default it runs with when unset (README.md's words
// where the default is no value, such as JetStream's share of memory).
func parseProblem(v variable, raw string, typ reflect.Type) error {
	value := fmt.Sprintf("%q", raw)
	if v.Secret {
		value = "the value (not repeated: it may hold a password)"
	}
	var kind, example string
	switch {
	case typ == reflect.TypeFor[time.Duration]():
		kind, example = "a duration", "a number with a unit such as 500ms, 30s, 5m or 1h"
	case typ.Kind() == reflect.Bool:
		kind, example = "true or false", "true or false"
	case typ.Kind() >= reflect.Int && typ.Kind() <= reflect.Int64 && isBytes(v.Name):
		kind, example = "a whole number of bytes", "a whole number of bytes (no unit: 1073741824 for 1 GiB)"
	case typ.Kind() >= reflect.Int && typ.Kind() <= reflect.Int64:
		kind, example = "a whole number", "a whole number"
	default:
		kind, example = "a value of type "+typ.String(), "one"
	}
	return fmt.Errorf("%s: %s is not %s; set %s, or unset it for the default (%s)", v.Name, value, kind, example, v.defaultWords())
}

// isBytes reports whether the variable name is a size in bytes.
func isBytes(name string) bool {
	return strings.HasSuffix(name, "_BYTES") || strings.HasSuffix(name, "_MEMORY") || strings.HasSuffix(name, "_PAYLOAD")
}

// knownPrefixes are the ORISUN_* variables that are not Config's and not
// the client commands': the test suite's (scripts/test) and the fault
// injection build's.
var knownPrefixes = []string{"ORISUN_TEST_", "ORISUN_FAULT_"}

// clientVariables are the variables the client commands read.
var clientVariables = []string{"ORISUN_URL"}

// replacedVariables are variables an earlier orisun read, with what to set
// instead, given the value set: serve warns about them as about any
// unknown variable, but says what took their place.
var replacedVariables = map[string]func(value string) string{
	"ORISUN_NATS_DISABLE_MSG_ID": func(value string) string {
		msg := "Nats-Msg-Id is now off unless ORISUN_NATS_MSG_ID=true"
		if off, err := strconv.ParseBool(value); err == nil && !off {
			msg += "; it is set to " + value + " here, which kept the header on: set ORISUN_NATS_MSG_ID=true to keep it"
		}
		return msg
	},
}

// unknown is an ORISUN_* variable that orisun does not read.
type unknown struct {
	name, closest, replaced string
}

func (u unknown) message() string {
	if u.replaced != "" {
		return u.name + " is no longer read and is ignored: " + u.replaced
	}
	msg := u.name + " is not a variable of orisun and is ignored"
	if u.closest != "" {
		msg += "; did you mean " + u.closest + "?"
	}
	return msg + " (orisun env lists every variable)"
}

// unknownVariables finds the ORISUN_* variables of environ that orisun does
// not read, each with the known variable closest to it, if one is close:
// a typo (ORISUN_BACKNED=postgres) would otherwise leave the node on its
// default in silence. serve warns about them and goes on, so that a node
// rolled back to an older release still starts with a newer one's
// variables set.
func unknownVariables(environ []string) []unknown {
	known := slices.Clone(clientVariables)
	for _, v := range variables() {
		known = append(known, v.Name)
	}
	var out []unknown
	for _, kv := range environ {
		name, value, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "ORISUN_") || slices.Contains(known, name) ||
			slices.ContainsFunc(knownPrefixes, func(p string) bool { return strings.HasPrefix(name, p) }) {
			continue
		}
		u := unknown{name: name}
		if replaced, ok := replacedVariables[name]; ok {
			u.replaced = replaced(value)
			out = append(out, u)
			continue
		}
		best := 4 // at most three edits of the part after ORISUN_
		for _, k := range known {
			if d := editDistance(strings.TrimPrefix(name, "ORISUN_"), strings.TrimPrefix(k, "ORISUN_")); d < best {
				u.closest, best = k, d
			}
		}
		out = append(out, u)
	}
	return out
}

func envCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "env",
		Short: "list the ORISUN_* variables of serve: default and meaning",
		Long: `Lists every ORISUN_* environment variable orisun serve reads, with its
default and what it means (README.md's configuration table), and says which
are set here (a secret's value is not shown) and which ORISUN_* variables
set here orisun does not know.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			printEnv(cmd.OutOrStdout(), os.Environ())
			return nil
		},
	}
}

// printEnv writes the variables, their defaults and meanings, and what of
// them environ sets.
func printEnv(w io.Writer, environ []string) {
	set := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			set[k] = v
		}
	}
	fmt.Fprintln(w, "# The variables of orisun serve: NAME=default, then its meaning. Every one is optional.")
	for _, v := range variables() {
		fmt.Fprintf(w, "\n%s=%s\n", v.Name, v.Default)
		switch {
		case v.Default != "":
		case v.DefaultText == "none":
			fmt.Fprintln(w, "    (no default)")
		default:
			// A default that is no value: README.md's words for it.
			wrap(w, "(default: "+v.DefaultText+")", "    ", 80)
		}
		wrap(w, v.Meaning, "    ", 80)
		if val, ok := set[v.Name]; ok {
			if v.Secret {
				val = "(not shown)"
			}
			fmt.Fprintf(w, "    Set here: %s\n", val)
		}
	}
	fmt.Fprintf(w, "\n# The client commands read ORISUN_URL, then NATS_URL, for --server, and NATS_CREDS for --creds.\n")
	if u := unknownVariables(environ); len(u) > 0 {
		fmt.Fprintln(w, "\n# Set here, but not variables of orisun (ignored):")
		for _, x := range u {
			fmt.Fprintf(w, "# %s\n", x.message())
		}
	}
}

// wrap writes text in lines of at most width columns, each indented.
func wrap(w io.Writer, text, indent string, width int) {
	line := indent
	for _, word := range strings.Fields(text) {
		if len(line) > len(indent) && len(line)+1+len(word) > width {
			fmt.Fprintln(w, line)
			line = indent
		}
		if len(line) > len(indent) {
			line += " "
		}
		line += word
	}
	if len(line) > len(indent) {
		fmt.Fprintln(w, line)
	}
}
