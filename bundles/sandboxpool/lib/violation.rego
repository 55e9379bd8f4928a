# METADATA
# description: The shape of one reason to deny an admission request.
package sandboxpool.lib.violation

# new builds the violation for field: msg starts with the dotted field path, so joined
# messages read like the API server's own field errors.
new(field, reason) := {"field": field, "msg": sprintf("%s: %s", [field, reason])}
