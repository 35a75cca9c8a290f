package cli

// Exit ends the process with a status. main binds its own into every
// command's Run, so that no command calls os.Exit and tests can replace it.
type Exit func(code int)

// Version is the version main was built with, bound into every command's
// Run beside Exit.
type Version string
