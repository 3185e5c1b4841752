package driver

// ClosedError returns the ErrClosed of a backend package named pkg: an error
// whose text is "<pkg>: backend closed" and that matches distlock.ErrClosed,
// so that callers can test for a closed backend without knowing which one.
// Call it once, for the package's exported sentinel.
func ClosedError(pkg string) error { return &closedError{pkg: pkg} }

type closedError struct{ pkg string }

func (e *closedError) Error() string { return e.pkg + ": backend closed" }

// Is makes the error match distlock.ErrClosed.
func (e *closedError) Is(target error) bool { return target == ErrClosed }
