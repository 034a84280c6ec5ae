package proto

import "time"

// RenewDue is when the project's certificates are renewed: once less than a third of
// the lifetime from notBefore to notAfter is left at now (122 days of an agent
// certificate's 365, 30 of the registry's serving certificate's 90).
func RenewDue(notBefore, notAfter, now time.Time) bool {
	return notAfter.Sub(now) < notAfter.Sub(notBefore)/3
}
