package repository

import "time"

// KitDrill is what a drill found in the recovery kit its backup names
// (DrillReport.Kit): the kit decrypted, and its certificates and keys
// parsed and paired. It holds no secret.
type KitDrill struct {
	// ID is the kit's id (Manifest.Kit).
	ID           string `json:"id"`
	Files        int    `json:"files"`
	Certificates int    `json:"certificates"`
	Keys         int    `json:"keys"`
	// Pairs are the certificates (or public keys) whose private key was
	// found beside them and matches, by path without extension.
	Pairs []string `json:"pairs,omitempty"`
	// EarliestCertExpiry is the soonest NotAfter of its certificates,
	// and EarliestCertPath the file; zero when it holds none.
	EarliestCertExpiry time.Time `json:"earliest_cert_expiry,omitzero"`
	EarliestCertPath   string    `json:"earliest_cert_path,omitempty"`
}
