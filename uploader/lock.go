package uploader

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// Retention is an Object Lock request relative to the time an object is
// written: a mode, for how long, and a legal hold. The zero Retention
// locks nothing.
type Retention struct {
	// Mode is "", GOVERNANCE or COMPLIANCE.
	Mode string
	// For is how long after writing the object stays locked (with Mode).
	For time.Duration
	// LegalHold requests a legal hold as well.
	LegalHold bool
}

// Enabled reports whether r locks anything.
func (r Retention) Enabled() bool { return r.Mode != "" || r.LegalHold }

// Until is the retain-until time of an object written at now: now + For,
// in UTC, to the second (the precision S3 keeps). Zero without a mode.
func (r Retention) Until(now time.Time) time.Time {
	if r.Mode == "" {
		return time.Time{}
	}
	return now.Add(r.For).UTC().Truncate(time.Second)
}

// Options are the PutOptions of an object written at now with r.
func (r Retention) Options(now time.Time, contentType string) PutOptions {
	return PutOptions{ContentType: contentType, LockMode: r.Mode, RetainUntil: r.Until(now), LegalHold: r.LegalHold}
}

// ExtendRetention makes key's Object Lock retention last at least until
// until, in mode (PutObjectRetention): a retention already reaching that
// far is left alone, and one is never shortened (S3 refuses to shorten
// COMPLIANCE, and GOVERNANCE only with a bypass that lifeboat never asks
// for). A kit reused by a newer backup is extended this way; the Dir store
// has no locks and no such method.
func (s *S3) ExtendRetention(ctx context.Context, key, mode string, until time.Time) error {
	full := s.prefix + key
	if err := ValidateLockMode(mode); err != nil {
		return fmt.Errorf("extend retention of %s: %w", s.name(full), err)
	}
	info, err := s.Stat(ctx, key)
	if err != nil {
		return fmt.Errorf("extend retention: %w", err)
	}
	if info.LockMode != "" && !info.RetainUntil.Before(until) {
		return nil
	}
	if info.LockMode != "" {
		mode = info.LockMode // a COMPLIANCE lock cannot become GOVERNANCE
	}
	_, err = s.client.PutObjectRetention(ctx, &s3.PutObjectRetentionInput{
		Bucket: aws.String(s.cfg.Bucket),
		Key:    aws.String(full),
		Retention: &types.ObjectLockRetention{
			Mode:            types.ObjectLockRetentionMode(mode),
			RetainUntilDate: aws.Time(until.UTC().Truncate(time.Second)),
		},
	})
	if err != nil {
		if isLockUnsupported(err) {
			return fmt.Errorf("extend retention of %s: %w: %w", s.name(full), s.errNoLock(), err)
		}
		return fmt.Errorf("extend retention of %s: %w", s.name(full), err)
	}
	return nil
}

// objectLockEnabled asks CreateBucket for a bucket with Object Lock
// enabled (which turns versioning on too) when the store is configured to
// lock what it writes (S3Config.ObjectLock): without it, every locked
// upload into the new bucket would fail.
func (s *S3) objectLockEnabled(in *s3.CreateBucketInput) {
	if s.cfg.ObjectLock {
		in.ObjectLockEnabledForBucket = aws.Bool(true)
	}
}
