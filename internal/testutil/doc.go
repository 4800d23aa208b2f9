// Package testutil is the one home of orisun's test scaffolding: waiting for
// a condition (Eventually, Until), a background load or monitor owned by the
// test (Every), racing callers released together (AtOnce), free loopback
// ports (FreePort, FreePorts) and a taken one (TakenPort), building a binary
// once per test binary (Build, OrisunBinary), running a child process and
// reading its output (StartProcess, StartNode), a small file system to fill
// as a full disk (MountTmpfs, FreeBytes, FillFile), the test binary run as
// a child process of its own tests (Children, StartChild, ChildCommand),
// the nats CLI (NATSCLI, RunNATSCLI), an operation held back by what the
// test holds (NotYet, Release), a read the test cannot go on without
// (Get), the rows of README.md's
// configuration table (ReadmeVariables), a recipe block of a document
// (DocRecipe), and the goroutine-leak checks: Main, which every package's
// TestMain calls, and NoLeaks for a single test. Being internal, it is
// orisun's machinery: its API may change without notice.
//
// Every package with tests has
//
//	func TestMain(m *testing.M) { testutil.Main(m) }
//
// (TestEveryPackageCallsMain checks that). Main runs the tests, removes what
// Build built, and fails the run when a goroutine the tests started still
// runs a few seconds after the last test: a test closes what it opens.
//
// It is used by tests only, and imports nothing but the standard library,
// so that every package's tests, internal ones included, can import it
// without a cycle.
package testutil
