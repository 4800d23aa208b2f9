//go:build testutiltag

package main

func init() { greeting = "hello, tagged" }
