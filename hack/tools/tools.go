//go:build tools

// Package tools pins the code generators the project runs with `go run`
// (kept in their own module so their dependencies never move the main
// module's versions).
package tools

import (
	_ "sigs.k8s.io/controller-tools/cmd/controller-gen"
	_ "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
)
