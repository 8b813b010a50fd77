// Package layering holds the test that keeps the repository's layers apart:
// which of our packages and which outside modules each core package may
// depend on. It has no code of its own.
package layering
