// Package hostconverge is bcd's host converger: it applies the host section of a node's
// NodeSpec (host-config units, package hostunit) to the machine and keeps it that way.
//
// A Converger makes one pass with Converge: the units it knows, in hostunit.Order(), each
// evaluating its when against the node's labels, reading the host's actual state,
// changing only what differs and reporting a UnitResult; then the units it does not know,
// each a terminal failure. A failing unit does not stop the others. Run repeats passes on
// a period and whenever a new spec arrives, reports every pass to a Reporter and
// acknowledges a generation once a pass of it had no failure.
//
// Every path the units read or write is under Converger.Root and every program they run
// goes through Converger.Runner, so tests converge a directory tree with a recording
// runner. The units themselves live in the subpackages kernel, nvidia and k8s, over the
// host environment of hostenv. docs/host-config.md is the operator's description.
package hostconverge
