package proxy

// injectFault says whether the named fault is to be injected now. Only a
// build with the ferry_faults tag (the end-to-end tests' ferryd) injects
// any; every other build answers no.
var injectFault = func(name string) bool { return false }

// faultDropFinishAnswer: the target finishes a migration and its answer
// never reaches the source, once.
const faultDropFinishAnswer = "drop-finish-answer"
