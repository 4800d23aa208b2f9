package orisun

import (
	_ "embed"
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"time"
)

// readme is README.md, whose configuration table says what each variable
// means; a test keeps the table and Config in agreement, so a field added
// to Config has its row there.
//
//go:embed README.md
var readme string

// Variable is one ORISUN_* environment variable of the orisun binary: the
// field of Config it sets, its default and what it means.
type Variable struct {
	// Name is the variable, e.g. ORISUN_DATA_DIR.
	Name string
	// Field is the Config field it sets, e.g. DataDir.
	Field string
	// Default is the value the binary runs with when the variable is not
	// set, written as the variable takes it (Defaults, from the XDefault
	// constants); empty when the default is the field's zero value.
	Default string
	// Meaning is what README.md's configuration table says of it, as plain
	// text.
	Meaning string
	// Secret is set for a variable whose value may hold a password or a
	// token (a URL may hold both): error messages never repeat its value.
	Secret bool
}

// Variables lists the variables of Config in the order of its fields.
func Variables() []Variable {
	meanings := readmeMeanings()
	defaults := reflect.ValueOf(Defaults())
	typ := defaults.Type()
	vars := make([]Variable, 0, typ.NumField())
	for i := range typ.NumField() {
		f := typ.Field(i)
		tag := f.Tag.Get("envconfig")
		if tag == "" {
			continue
		}
		v := Variable{Name: "ORISUN_" + tag, Field: f.Name, Meaning: meanings["ORISUN_"+tag]}
		if d := defaults.Field(i); !d.IsZero() {
			v.Default = variableText(d.Interface())
		}
		v.Secret = strings.Contains(tag, "PASSWORD") || strings.Contains(tag, "TOKEN") ||
			strings.Contains(tag, "SECRET") || strings.HasSuffix(tag, "URL")
		vars = append(vars, v)
	}
	return vars
}

// variableText writes a value as a variable takes it: 5m, not 5m0s.
func variableText(v any) string {
	switch v := v.(type) {
	case time.Duration:
		return strings.ReplaceAll(limitText(v), "µs", "us")
	case []string:
		return strings.Join(v, ",")
	default:
		return fmt.Sprint(v)
	}
}

// mdLink is a Markdown link: [text](target).
var mdLink = regexp.MustCompile(`\[([^\]]+)\]\(([^)]+)\)`)

// readmeMeanings reads the meaning column of README.md's configuration
// table, as plain text: no backticks, a link as its text (and its target
// when that is a file).
func readmeMeanings() map[string]string {
	out := map[string]string{}
	_, table, ok := strings.Cut(readme, "\n| variable | default | meaning |\n|---|---|---|\n")
	if !ok {
		return out
	}
	for _, line := range strings.Split(table, "\n") {
		if !strings.HasPrefix(line, "|") {
			break
		}
		cells := strings.SplitN(line, " | ", 3)
		if len(cells) < 3 {
			continue
		}
		name := strings.Trim(strings.TrimPrefix(cells[0], "| "), "`")
		text := strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(cells[2]), "|"))
		text = mdLink.ReplaceAllStringFunc(text, func(l string) string {
			m := mdLink.FindStringSubmatch(l)
			if m[1] == m[2] || strings.HasPrefix(m[2], "#") || strings.Trim(m[1], "`") == m[2] {
				return m[1]
			}
			return m[1] + " (" + m[2] + ")"
		})
		out[name] = strings.ReplaceAll(text, "`", "")
	}
	return out
}
