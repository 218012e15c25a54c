// Package drive runs the migrations Ferry drives itself: libvirt's v3
// protocol over Ferry's proxy, as libvirt's own client runs it
// (virDomainMigrateVersion3Full), with a Source on the node the guest
// leaves and a Target on the node it goes to.
//
// Step by step, and where Ferry deviates:
//
//   - Begin3 on the source, with CHANGE_PROTECTION, on a libvirt
//     connection of the migration's own: libvirt ties a migration's state
//     to the connection that runs it.
//   - Prepare3 on the target, through the proxy's control request. The
//     target checks the domain XML first (an allowlist, and a check that
//     the canonical form loses nothing) and gives libvirt the checked XML,
//     never the peer's bytes. A persistent guest's definition (its
//     inactive config) comes beside the live XML and is checked the same
//     way. A Prepare3 that answers after the target gave up is undone.
//   - Perform3 on the source, its streams through the proxy. One Owner
//     applies everything that acts on the job meanwhile (deadline,
//     policy, post-copy timer, operator), one at a time. Ferry never
//     times out post-copy.
//   - Finish3 on the target, with PERSIST_DEST for a persistent guest and
//     the target's checked definition in place of the source's in the
//     cookie: libvirt saves it before it starts the guest there, and fails
//     the Finish if it cannot, as between two libvirts. Asked until it
//     says for certain whether the guest runs there; the target records
//     that answer durably before and after (no pre-copy Finish3 without
//     the record before). A lost answer is asked again, never guessed: past a
//     short window the job is InDoubt and the guest stays paused on the
//     source until the target answers or an operator decides.
//   - Confirm3 on the source, cancelled only when the target said its
//     copy is not running; after a failed Perform3 there is no Confirm3,
//     as in libvirt's client. The guest's autostart here is off from
//     before Perform3 to the end; then the definition here follows
//     libvirt on both nodes (definition.go): removed once the guest runs
//     on the target and is defined there, autostart back on if it stays.
//
// A restarted ferryd finds its driven migrations in its state directory
// and settles them with the target the same way.
//
// Files say their side, as KubeVirt's migration-source.go and
// migration-target.go do: source*.go are the node the guest leaves (the
// Source, its records, finish, recovery and settling), target*.go the node
// it goes to (the Target, its admission, checks and recovery), owner.go
// the one goroutine that acts on a running migration; the rest (requests,
// slots, the drives under way, definitions and their notes) serve both.
package drive
