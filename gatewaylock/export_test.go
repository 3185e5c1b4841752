package gatewaylock

// Escape is escape, for the tests.
var Escape = escape
