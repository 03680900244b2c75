// Package archtest holds the import rules of the module's packages: which
// of completiond's packages each may import. Its test fails when a package
// imports one its rule does not name (a lower layer reaching up, or a new
// dependency nobody decided on), or when a package has no rule.
//
// It has no code of its own.
package archtest
