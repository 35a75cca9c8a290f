package bootstrap

import (
	"errors"
	"fmt"
)

// CheckObject returns nil when body is one valid JSON object, optionally
// surrounded by whitespace, and otherwise the error Parse returns for it,
// so that a route that reads no generation (an /abort_request) tells a
// client the same as the generate routes. It does not keep body.
func CheckObject(body []byte) error {
	i := skipSpace(body, 0)
	switch {
	case i == len(body):
		return &notObjectError{got: "an empty body", cause: errUnexpectedEnd}
	case body[i] != '{':
		return notObject(body, i)
	}
	// As Parse: the members first, whose scan says where an object went
	// wrong as Parse's does and bounds the nesting depth, then the rest.
	ms, err := newMembers(body)
	for ok := err == nil; ok; {
		_, ok, err = ms.next()
	}
	if err == nil {
		err = validate(body)
	}
	if err != nil {
		return fmt.Errorf("%w: %w", ErrNotJSON, err)
	}
	return nil
}

// notObject returns the error for a body whose first non-space byte, at
// body[i], does not open an object.
func notObject(body []byte, i int) error {
	switch err := validate(body); {
	case err == nil:
		return &notObjectError{got: "a JSON " + kindOf(body[i])}
	case errors.Is(err, errTooDeep):
		return &notObjectError{got: "a JSON " + kindOf(body[i]), cause: err}
	default:
		return &notObjectError{got: "a body that is not JSON", cause: err}
	}
}

// notObjectError is Parse's error for a body that is not a JSON object. It
// wraps ErrNotObject, and ErrNotJSON too when the body is not valid JSON,
// but says what the body is rather than where a JSON reader stopped in it:
// a form's "text=hi" was "expected true at offset 0" (issue 20).
type notObjectError struct {
	got   string // what the body is instead, as "a JSON array"
	cause error  // why the body is not valid JSON; nil if it is
}

func (e *notObjectError) Error() string { return ErrNotObject.Error() + ", got " + e.got }

func (e *notObjectError) Unwrap() []error {
	if e.cause == nil {
		return []error{ErrNotObject}
	}
	return []error{ErrNotObject, ErrNotJSON, e.cause}
}
