// Package docs holds Ferry's documentation, the Markdown files beside this
// one. Its test checks that every link between the documents, and every
// alert's runbook_url, leads to a file and a heading that exist: a section
// moved or renamed must not leave an operator on a dead link.
package docs
