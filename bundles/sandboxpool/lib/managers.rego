# METADATA
# description: |
#   Field ownership (docs/design.md §4): every writer speaks only for itself. The two
#   writers of the SandboxPool API each own their fields under their field manager
#   (names.controller_field_manager, names.agent_field_manager), and server-side apply holds
#   them to it: a manager that owns a field another applies conflicts with that apply, and a
#   field dropped from an applier's set is removed. So no one may
#   - write under a writer's field manager but that writer: the manager a request names
#     (request.options.fieldManager), or an entry of the writer's the request writes (new, or
#     with a new time: the name a client without fieldManager gets from its user agent);
#   - give a writer's field manager fields it did not own (an edit of metadata.managedFields
#     that grows its entry: its next apply would remove them);
#   - give fields a writer owns to any other field manager (an edit of
#     metadata.managedFields, or an apply that co-owns them: the writer's next apply would
#     conflict).
#   A write that only shrinks a writer's entry, by removing the fields themselves (a
#   finalizer removed, an owner reference orphaned by the garbage collector), is left alone.
#   The writers: the controller (identity.is_controller) under controller_field_manager on
#   every object; the pool's node (system:node:<spec.nodeName>) under agent_field_manager on
#   its pool's status only. On a pool's status the claims of status fields are
#   admission/status.rego's (it names the field and the writer that owns it); this covers
#   the rest.
package sandboxpool.lib.managers

import data.sandboxpool.lib.identity
import data.sandboxpool.lib.names
import data.sandboxpool.lib.request
import data.sandboxpool.lib.violation

protected := {names.controller_field_manager, names.agent_field_manager}

# rightful is true when the caller may write under the field manager m.
rightful(m) if {
	m == names.controller_field_manager
	identity.is_controller(request.user)
}

rightful(m) if {
	m == names.agent_field_manager
	request.kind == "pool_status"
	node := object.get(request.old, ["spec", "nodeName"], "")
	node != ""
	identity.is_node(request.user, node)
}

field(m) := sprintf("metadata.managedFields[manager=%s]", [m])

who := sprintf("caller %s", [request.username])

deny contains violation.new(field(m), msg) if {
	m := object.get(input.request, ["options", "fieldManager"], "")
	m in protected
	not rightful(m)
	msg := sprintf("%s writes under this field manager only; %s may not", [writer(m), who])
}

deny contains violation.new(field(e.manager), msg) if {
	some e in touched
	e.manager in protected
	not rightful(e.manager)
	written_under(e)
	msg := sprintf("%s writes under this field manager only; %s may not (a client without a field manager is named after its user agent)", [writer(e.manager), who])
}

deny contains violation.new(field(e.manager), msg) if {
	some e in touched
	e.manager in protected
	not rightful(e.manager)
	not written_under(e)
	some leaf in added(e)
	msg := sprintf("%s may not give %s the field %s (its next apply would remove it)", [who, writer(e.manager), render(leaf)])
}

deny contains violation.new("metadata.managedFields", msg) if {
	some e in touched
	some leaf in added(e)
	not status_claim(leaf)
	some m in protected
	m != e.manager
	leaf in owned[m]
	msg := sprintf(
		"%s is owned by %s (field manager %s); %s may not give it to field manager %s (its next apply would conflict)",
		[render(leaf), writer(m), m, who, e.manager],
	)
}

writer(m) := "the controller" if m == names.controller_field_manager

writer(m) := "the placeholder agent of the pool's node" if m == names.agent_field_manager

old_entries := {e | some e in object.get(request.old, ["metadata", "managedFields"], [])}

# touched are the entries of the new object that the old one does not hold as they are.
touched contains e if {
	some e in object.get(request.obj, ["metadata", "managedFields"], [])
	not e in old_entries
}

key(e) := [e.manager, object.get(e, "operation", ""), object.get(e, "subresource", "")]

# previous is the old entry with the key of e, if any.
previous(e) := p if {
	some p in old_entries
	key(p) == key(e)
}

# written_under is true when the request writes under e's manager: the API server gives the
# entry of the manager a request writes under the request's time.
written_under(e) if not previous(e)

written_under(e) if previous(e).time != object.get(e, "time", null)

# added are the fields e owns that its previous entry did not; "." (a map's or list's own
# existence) is left out. Computed only for entries whose fields changed.
added(e) := leaves(object.get(e, "fieldsV1", {})) - leaves(object.get(previous(e), "fieldsV1", {})) if {
	object.get(e, "fieldsV1", {}) != object.get(previous(e), "fieldsV1", {})
} else := leaves(object.get(e, "fieldsV1", {})) if not previous(e)

leaves(fields) := {path |
	walk(fields, [path, value])
	value == {}
	count(path) > 0
	path[count(path) - 1] != "."
}

# owned are the fields each writer's entries held before the request.
owned[m] := {leaf |
	some e in old_entries
	e.manager == m
	some leaf in leaves(object.get(e, "fieldsV1", {}))
} if {
	some m in protected
}

status_claim(leaf) if {
	request.kind == "pool_status"
	leaf[0] == "f:status"
}

render(path) := concat(".", [trim_prefix(p, "f:") | some p in path])
