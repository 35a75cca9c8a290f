// Package cli holds what pdlb's commands share on their command line, so
// that each command can live in the package that does its work: the usage
// error that exits with status 2, the log flags, the number readers kong
// is given, the listen rule, list flags' items, and the handling of stop
// signals. It imports no other pdlb package.
package cli
