// Command hello is what the tests of testutil build: it prints a greeting,
// another with the build tag testutiltag.
package main

import "fmt"

var greeting = "hello"

func main() { fmt.Println(greeting) }
