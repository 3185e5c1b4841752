package gatewaylock

// Escape is escape, for the tests.
var Escape = escape

// ProblemIs reports whether a gateway answer of status and problem type
// (its last part) matches target.
func ProblemIs(status int, kind string, target error) bool {
	return (&apiError{Status: status, Type: "urn:distlock:problem:" + kind}).Is(target)
}
