package daemon

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ferry-vm/ferry/internal/generated"
)

const apiDocPath = "../docs/api.md"

// apiDoc renders docs/api.md from the router's own table.
func apiDoc(routes []route) string {
	var b strings.Builder
	b.WriteString(`# The debug API

<!-- Generated from daemon/routes.go by make generate; do not edit. -->

ferryd serves this on its debug socket (` + "`--debug-socket`" + `), the one ferryctl
reads; the metrics port serves only ` + "`/metrics`" + `, ` + "`/healthz`" + ` and ` + "`/readyz`" + `.
Bodies and answers are JSON, of the types in package ` + "`api`" + ` (the wire contract,
standard library only); an error is ` + "`{\"error\": \"...\"}`" + ` with a status that says
its kind: 400 a request that is wrong, 404 nothing of that name, 409 a state
that forbids it (a name two libvirt sockets serve is one: add ` + "`socket=`" + `),
502 libvirt or the peer failed, 503 no libvirt. The socket's file mode is the
only check: see [operations.md](operations.md#the-debug-api).

| route | query | body | answer | what it does |
|---|---|---|---|---|
`)
	for _, r := range routes {
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", r.pattern, orDash(r.query), orDash(code(r.body)), code(r.answer), r.doc)
	}
	return b.String()
}

func orDash(s string) string {
	if s == "" {
		return "–"
	}
	return s
}

// code marks an api type's name as code; prose stays prose.
func code(s string) string {
	if s == "" || strings.ContainsAny(s, " ,") {
		return s
	}
	return "`" + s + "`"
}

// docs/api.md is what the router serves; FERRY_UPDATE_DOCS=1 (make generate)
// writes it.
func TestAPIDocIsCurrent(t *testing.T) {
	generated.Check(t, apiDocPath, []byte(apiDoc(debugRoutes())), "daemon/routes.go")
}
