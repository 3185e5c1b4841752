// Package schemes holds the tests of package backends that open every
// built-in scheme. They need every backend, and so every backend's
// module; the root module, where package backends lives, requires none of
// them. The CLI's module, which registers every backend, runs them.
package schemes
