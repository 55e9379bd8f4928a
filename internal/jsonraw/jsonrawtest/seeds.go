// Package jsonrawtest holds test data for readers of raw JSON.
package jsonrawtest

import (
	"strings"

	"github.com/agentcube/sandboxpool/internal/jsonraw"
)

// Seeds are edge cases of JSON validity: each is valid or invalid as encoding/json
// judges it, for tests that compare a reader of raw JSON with encoding/json.
var Seeds = []string{
	``, ` `, `{}`, `[]`, `""`, `0`, `-0`, `01`, `-`, `1.`, `.5`, `1.5`, `1e5`, `1E+5`, `1e`, `1e+`, `-1.25e-7`,
	`true`, `false`, `null`, `tru`, `nul`, `truex`, `NaN`, `Infinity`, `+1`,
	`{"a":1}`, `{"a":1,}`, `{"a" 1}`, `{a:1}`, `{"a":1 "b":2}`, `[1,2]`, `[1,]`, `[,1]`, `[1 2]`,
	`"\u00e9"`, `"\u00G9"`, `"\ud800"`, `"\x41"`, `"\/"`, "\"tab\there\"", "\"\x7f\"", "\"\xff\xfe\"",
	` {"a" : [ true , null ] } `, `{"a":{"b":{"c":[]}}}`, `{} {}`, `{}x`, `"unterminated`, `"\`, `"\u12`,
	strings.Repeat("[", jsonraw.MaxDepth) + strings.Repeat("]", jsonraw.MaxDepth),
	strings.Repeat("[", jsonraw.MaxDepth+1) + strings.Repeat("]", jsonraw.MaxDepth+1),
	strings.Repeat(`{"a":`, jsonraw.MaxDepth) + "1" + strings.Repeat("}", jsonraw.MaxDepth),
	strings.Repeat(`{"a":`, jsonraw.MaxDepth+1) + "1" + strings.Repeat("}", jsonraw.MaxDepth+1),
}
