package testkit

var Leaked = leaked
