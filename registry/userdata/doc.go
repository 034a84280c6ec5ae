// Package userdata renders the first-boot configuration (user data) a deployed OS joins
// the registry with: the configuration it is started with (controlPlaneUrl, bcdUrl,
// bcdSha256, pins, custom templates), the variables a template sees, the templates that
// ship (bcd-host.yaml.hbs for cloud-init, bcd-host.ign for Ignition 3.4.0) and custom
// ones, and the Renderer.
//
// Render mints a single-use provisioned join token for the node, renders the profile's
// template, seals the document into the secret store (registry/secret) and returns only
// a reference. Fetch hands the document to the ramdisk of that node and to nobody else.
// Preview renders what a node would boot with, its token redacted, minting and storing
// nothing.
//
// Values never change a document's structure: each is checked (a single line, no "{{"),
// the cloud-init template quotes every value for YAML and the shell, and the Ignition
// template is built as data and serialized as JSON. docs/userdata.md is the reference.
package userdata
