package main

import (
	_ "embed"
	"encoding/json"

	"github.com/ferrymq/ferry/cmd/ferry/internal/ops"
)

// semantics.json is the declared semantics of every transport
// configuration in the table, as TestSemanticsTable reads them from the
// transports' Declare; `go generate` rewrites it and the table of
// docs/transports/README.md, and the test fails when either differs.
//
//go:generate go test -run ^TestSemanticsTable$ -update-semantics .
//go:embed semantics.json
var semanticsJSON []byte

// semanticsRows is the table `ferry semantics` prints.
func semanticsRows() []ops.SemanticsRow {
	var rows []ops.SemanticsRow
	if err := json.Unmarshal(semanticsJSON, &rows); err != nil {
		panic("ferry: the embedded semantics.json is malformed: " + err.Error())
	}
	return rows
}
