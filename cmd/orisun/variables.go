package main

import (
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/orisun-io/orisun"
)

//go:generate go test -run TestEnvTable . -args -update

// variable is one ORISUN_* variable of orisun serve: the field of
// orisun.Config it sets, its default and what it means. It is the
// binary's concern (orisun env, the configuration errors), so it lives
// here and not in package orisun, which a program embedding a node imports.
type variable struct {
	// Name is the variable, e.g. ORISUN_DATA_DIR.
	Name string
	// Field is the Config field it sets, e.g. DataDir.
	Field string
	// Default is the value the binary runs with when the variable is not
	// set, written as the variable takes it (orisun.Defaults, from the
	// XDefault constants, else README.md's literal such as false); empty
	// when there is no such value (a node id made at start, JetStream's
	// share of the host's memory, none).
	Default string
	// DefaultText is README.md's default column as plain text: the
	// default said in words where Default is empty ("host name + random
	// suffix, …", "JetStream's: 75% of the host's memory", "none").
	DefaultText string
	// Meaning is README.md's meaning column, as plain text.
	Meaning string
	// Secret is set for a variable whose value may hold a password or a
	// token (a URL may hold both): error messages never repeat its value.
	Secret bool
}

// variables lists the variables of orisun.Config in the order of its
// fields. The defaults come from orisun.Defaults, the words from
// README.md's configuration table (readmeTable, generated from it; the
// root package's TestConfigDefaultsMatchREADME keeps the table and the
// defaults in agreement).
func variables() []variable {
	defaults := reflect.ValueOf(orisun.Defaults())
	typ := defaults.Type()
	vars := make([]variable, 0, typ.NumField())
	for i := range typ.NumField() {
		f := typ.Field(i)
		tag := f.Tag.Get("envconfig")
		if tag == "" {
			continue
		}
		name := "ORISUN_" + tag
		row := readmeTable[name]
		v := variable{Name: name, Field: f.Name, Default: row.literal, DefaultText: row.text, Meaning: row.meaning}
		if d := defaults.Field(i); !d.IsZero() {
			v.Default = variableText(d.Interface())
		}
		v.Secret = strings.Contains(tag, "PASSWORD") || strings.Contains(tag, "TOKEN") ||
			strings.Contains(tag, "SECRET") || strings.HasSuffix(tag, "URL")
		vars = append(vars, v)
	}
	return vars
}

// defaultWords is how a message says the default of v: its value, else
// README.md's words for it.
func (v variable) defaultWords() string {
	switch {
	case v.DefaultText != "" && v.DefaultText != "none":
		return v.DefaultText
	case v.Default != "":
		return v.Default
	}
	return "none"
}

// readmeRow is one row of README.md's configuration table, as plain text.
type readmeRow struct {
	literal string // the default column's `literal`, if it starts with one
	text    string // the default column
	meaning string
}

// variableText writes a value as a variable takes it: 5m, not 5m0s.
func variableText(v any) string {
	switch v := v.(type) {
	case time.Duration:
		s := v.String()
		if strings.HasSuffix(s, "m0s") {
			s = s[:len(s)-2]
		}
		if strings.HasSuffix(s, "h0m") {
			s = s[:len(s)-2]
		}
		return strings.ReplaceAll(s, "µs", "us")
	case []string:
		return strings.Join(v, ",")
	default:
		return fmt.Sprint(v)
	}
}
