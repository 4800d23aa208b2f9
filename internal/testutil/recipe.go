package testutil

import (
	"os"
	"strings"
	"testing"
)

// DocRecipe returns the fenced block that follows the marker
// "<!-- recipe: name" in the document at path (the marker's comment may
// say more after the name; the block's opening fence may name a
// language), so that a test runs a recipe as the documentation writes it.
// It fails the test when there is no such block.
func DocRecipe(t testing.TB, path, name string) string {
	t.Helper()
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(doc), "<!-- recipe: "+name)
	if ok {
		_, block, ok = strings.Cut(block, "\n```")
	}
	if ok {
		_, block, ok = strings.Cut(block, "\n") // the rest of the opening fence's line
	}
	if ok {
		block, _, ok = strings.Cut(block, "\n```\n")
	}
	if !ok {
		t.Fatalf("%s has no recipe block %q (<!-- recipe: %s … --> and a fenced block after it)", path, name, name)
	}
	return block
}
