package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"reflect"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Bounds of the enforced resources.
const (
	// MinCPUMilli is the smallest cpu: the kernel's minimum CFS quota is 1 ms per period,
	// and node-ctl uses the default 100 ms period, so 10m.
	MinCPUMilli = 10
	// MaxCPUMilli bounds cpu far above any node so the quota arithmetic cannot overflow.
	MaxCPUMilli = 1 << 32
	// MinMemoryBytes is the smallest memory: no sandbox fits in less, and it catches a
	// unit-less "64" that meant 64Mi.
	MinMemoryBytes = 1 << 20
	// MaxMemoryBytes bounds memory far above any node.
	MaxMemoryBytes = 1 << 62
)

// InvalidConfigError is a config that cannot be decoded or breaks a rule.
type InvalidConfigError struct {
	// Errors lists the invalid fields; empty when the file as a whole is at fault.
	Errors field.ErrorList
	// Err is why the file is not a JSON config object at all, when Errors is empty.
	Err error
}

// Error implements error.
func (e *InvalidConfigError) Error() string {
	if len(e.Errors) == 0 {
		return fmt.Sprintf("invalid node-ctl config: %v", e.Err)
	}
	return "invalid node-ctl config: " + e.Errors.ToAggregate().Error()
}

// Unwrap returns the decoding error, if any.
func (e *InvalidConfigError) Unwrap() error { return e.Err }

// Field is the path of the first invalid field ("resources[memory]"), or "" when the file
// as a whole is at fault.
func (e *InvalidConfigError) Field() string {
	if len(e.Errors) == 0 {
		return ""
	}
	return e.Errors[0].Field
}

// ParseConfig decodes a config file strictly (unknown fields and trailing data are errors)
// and validates it. Every error is an *InvalidConfigError.
func ParseConfig(data []byte) (*Config, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var cfg Config
	if err := dec.Decode(&cfg); err != nil {
		return nil, decodeError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, &InvalidConfigError{Err: errors.New("trailing data after the JSON object")}
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &cfg, nil
}

// decodeError turns a json decoding error into an *InvalidConfigError naming the field when
// the decoder knows it.
func decodeError(err error) *InvalidConfigError {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) && typeErr.Field != "" {
		return &InvalidConfigError{Errors: field.ErrorList{field.TypeInvalid(
			field.NewPath(typeErr.Field), typeErr.Value, "must be a JSON "+jsonKind(typeErr.Type.Kind()))}}
	}
	// encoding/json reports unknown fields only as text: `json: unknown field "name"`.
	if name, ok := strings.CutPrefix(err.Error(), `json: unknown field "`); ok {
		return &InvalidConfigError{Errors: field.ErrorList{field.Forbidden(
			field.NewPath(strings.TrimSuffix(name, `"`)), "unknown field in apiVersion "+APIVersion)}}
	}
	return &InvalidConfigError{Err: fmt.Errorf("not a JSON config object: %w", err)}
}

// jsonKind names the JSON type a Go kind decodes from.
func jsonKind(k reflect.Kind) string {
	switch k {
	case reflect.String:
		return "string"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "integer"
	case reflect.Struct, reflect.Map:
		return "object"
	default:
		return k.String()
	}
}

// Validate checks c against the contract. The error, if any, is an *InvalidConfigError
// listing every violation.
func (c *Config) Validate() error {
	var errs field.ErrorList
	if c.APIVersion != APIVersion {
		errs = append(errs, field.NotSupported(field.NewPath("apiVersion"), c.APIVersion, []string{APIVersion}))
	}
	pool := field.NewPath("pool")
	if c.Pool.Name == "" {
		errs = append(errs, field.Required(pool.Child("name"), "the SandboxPool's name"))
	}
	if c.Pool.UID == "" {
		errs = append(errs, field.Required(pool.Child("uid"), "the SandboxPool's uid"))
	}
	if c.Generation < 1 {
		errs = append(errs, field.Invalid(field.NewPath("generation"), c.Generation,
			"must be the SandboxPool's metadata.generation (at least 1)"))
	}
	errs = append(errs, validateResources(field.NewPath("resources"), c.Resources)...)
	if len(errs) > 0 {
		return &InvalidConfigError{Errors: errs}
	}
	return nil
}

func validateResources(path *field.Path, res map[string]string) field.ErrorList {
	var errs field.ErrorList
	for _, name := range []string{ResourceCPU, ResourceMemory} {
		if _, ok := res[name]; !ok {
			errs = append(errs, field.Required(path.Key(name), "cpu and memory are required"))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(res)) {
		value, p := res[name], path.Key(name)
		if strings.TrimSpace(name) == "" {
			errs = append(errs, field.Invalid(p, name, "resource name must not be empty"))
			continue
		}
		q, err := resource.ParseQuantity(value)
		if err != nil {
			errs = append(errs, field.Invalid(p, value, "must be a Kubernetes quantity: "+err.Error()))
			continue
		}
		switch name {
		case ResourceCPU:
			if q.CmpInt64(MaxCPUMilli/1000) > 0 {
				errs = append(errs, field.Invalid(p, value, "must be at most 4294967 cores"))
			} else if q.MilliValue() < MinCPUMilli {
				errs = append(errs, field.Invalid(p, value,
					"must be at least 10m (the kernel's minimum CFS quota of 1ms per 100ms period)"))
			}
		case ResourceMemory:
			if q.CmpInt64(MaxMemoryBytes) > 0 {
				errs = append(errs, field.Invalid(p, value, "must be at most 4Ei"))
			} else if q.CmpInt64(MinMemoryBytes) < 0 {
				errs = append(errs, field.Invalid(p, value, "must be at least 1Mi"))
			}
		default:
			if q.Sign() < 0 {
				errs = append(errs, field.Invalid(p, value, "must not be negative"))
			}
		}
	}
	return errs
}

// CPUMilli is the config's cpu in millicores, rounded up. Only meaningful after Validate.
func (c *Config) CPUMilli() int64 {
	q, _ := resource.ParseQuantity(c.Resources[ResourceCPU])
	return q.MilliValue()
}

// MemoryBytes is the config's memory in bytes, rounded up. Only meaningful after Validate.
func (c *Config) MemoryBytes() int64 {
	q, _ := resource.ParseQuantity(c.Resources[ResourceMemory])
	return q.Value()
}
