package drill

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/lifeboat-dev/lifeboat/kit"
	"github.com/lifeboat-dev/lifeboat/repository"
)

// kitChecks checks the recovery kit the backup names, if any: it is
// stored, decrypts to its id's content, and every certificate and key in
// it parses, each certificate matching the key beside it. A kit that is
// missing, damaged or fails those checks is a failed check (a verdict: a
// restore on new hosts would lack it); a missing or wrong identity, or a
// store error, is an error of the run, as for the backup's own object.
// The report gets the kit's figures and earliest certificate expiry.
func (d *drill) kitChecks(ctx context.Context) error {
	id := d.m.Kit
	if id == "" {
		return nil
	}
	kr := kit.Repo{Store: d.o.Backups.Store, Cluster: d.o.Backups.Cluster, Trust: d.o.Backups.Trust}
	km, err := kr.Manifest(ctx, id)
	switch {
	case errors.Is(err, kit.ErrNotFound) || errors.Is(err, kit.ErrBadKit):
		d.check("kit stored", "kit "+id, err.Error(), false)
		return nil
	case err != nil:
		return fmt.Errorf("recovery kit %s: %w", id, err)
	}
	k, err := kr.Load(ctx, km, d.o.Identities)
	switch {
	case errors.Is(err, kit.ErrBadKit) || errors.Is(err, kit.ErrNotFound):
		d.check("kit content", "sha256 "+id, err.Error(), false)
		return nil
	case err != nil:
		return fmt.Errorf("recovery kit: %w", err)
	}
	d.check("kit content", "sha256 "+id, "sha256 "+id, true)
	res, cerr := k.Check()
	actual := fmt.Sprintf("%d certificates and %d keys parse, %d pairs match", res.Certificates, res.Keys, len(res.Pairs))
	if cerr != nil {
		actual = strings.Join(res.Problems, "; ")
	}
	d.check("kit certificates and keys", "parse, and match their keys", actual, cerr == nil)
	d.rep.Kit = &repository.KitDrill{
		ID: id, Files: res.Files, Certificates: res.Certificates, Keys: res.Keys, Pairs: res.Pairs,
		EarliestCertExpiry: res.EarliestExpiry, EarliestCertPath: res.EarliestPath,
	}
	if !res.EarliestExpiry.IsZero() {
		d.lg.Info("recovery kit checked", "kit_id", id, "certificates", res.Certificates, "earliest_cert_expiry", res.EarliestExpiry, "earliest_cert_path", res.EarliestPath)
	}
	return nil
}
