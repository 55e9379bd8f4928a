package schema

import (
	"encoding/json"
	"fmt"
)

// DefaultAs validates and defaults obj, a typed object of kind, and returns the defaulted
// copy: the round trip through JSON that every component makes to act on a spec with the
// schema's defaults filled in (the controller on a class's snapshot, the agent on its pool).
func DefaultAs[T any](s *Schema, kind Kind, obj *T) (*T, error) {
	in, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("encoding the %s: %w", kind, err)
	}
	out, err := s.Default(kind, in)
	if err != nil {
		return nil, err
	}
	var d T
	if err := json.Unmarshal(out, &d); err != nil {
		return nil, fmt.Errorf("decoding the defaulted %s: %w", kind, err)
	}
	return &d, nil
}
