// Package labelexpr parses and evaluates label expressions: the `when` of a profile step
// and of a host-config unit, tested against a node's labels (a map of strings).
//
// # Syntax
//
//	nvswitch                     the label is set, to anything but "false" or "0"
//	!lab                         not: the label is unset, "false" or "0"
//	gpu.vendor=nvidia            the label is set to exactly this value
//	gpu.vendor!=amd              the label is unset or set to another value
//	a && b    a, b               both (the comma is a synonym of &&)
//	a || b                       either
//	(a || b) && !c               parentheses group
//
// ! binds tightest and applies to one term or group (!a=b is !(a=b)), then && (and ,),
// then ||. Spaces and tabs may surround any operator; nothing else is blank.
//
// A label name is letters, digits, '.', '_', '-' and '/', starting with a letter or a
// digit (gpu.vendor, nvidia.com/gpu.product). A value is written bare when it is letters,
// digits and any of . _ - : / + @ (H100-SXM5-80GB, 12.4), else between single quotes,
// which hold any characters but the single quote and control characters ('two words');
// two single quotes with nothing between them are the empty value.
// Comparison is exact and case-sensitive.
//
// # Limits
//
// An expression is at most MaxLen bytes, names and values at most MaxNameLen bytes, and
// groups and negations nest at most MaxDepth deep, both as written and in canonical form
// (below), so that what Parse accepts it accepts again as String writes it. Errors are
// *SyntaxError with the column of the problem.
//
// String writes the canonical form (&& for the comma, single spaces around && and ||,
// parentheses only where needed); parsing it gives back the same expression.
package labelexpr
