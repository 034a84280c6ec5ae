// Package workflow runs a profile's rendered steps for one node: the main steps, then
// acceptance, then cleanup whatever the outcome. Control-plane steps run in the registry
// through the Handler registered for their name; the others are relayed to the site
// agent, the ramdisk or the node through a Relay, under a command id that is the same for
// the same attempt after a restart, so an agent answers a resent command with its stored
// result.
//
// Every step's state lives in the store (store.Run): the engine writes it before and
// after each attempt, so a registry killed at any point resumes its running runs with
// Resume, repeats no step that completed and re-sends the one that was running under
// the same command id. Step fields (timeout, retries, onFailure, fallback, when,
// await: rejoin) behave as docs/workflows.md describes; time comes from an injected
// clock. Cancel marks a run cancelled and Abort abandons the attempt it is on: its main
// steps stop, its cleanup runs, and it fails. A handler returns Skip for a step that does
// not apply to the machine.
package workflow
