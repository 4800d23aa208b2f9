// Package doccheck holds no code, only the test that keeps the repository's
// citations of its own design documents valid: every section (§n),
// invariant (I1–I7), checker rule (C1–C8) and fault scenario (S1–S16) cited
// in a tracked file must exist in docs/design.md or docs/test-plan.md, and
// nothing may cite documents that live outside the repository. Being
// internal, it is orisun's machinery: its API may change without notice.
//
// It is a package of its own so that the check runs in a second, without
// compiling the root package's tests.
package doccheck
