package testkit

var Leaked = leaked

var WriteSkipSummary = writeSkipSummary
