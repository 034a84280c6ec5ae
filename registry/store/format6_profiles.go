package store

// formatProfileRefs is the format that added bucketProfileRefs and the version's key in
// the values of bucketRunsByEnd (runEndValue).
const formatProfileRefs = 6

// profileRefs is bucketProfileRefs as a format raise fills it: every run of a stored
// version and every node naming one gets its entry, and every other entry goes.
var profileRefs = derivedIndex{
	diff: func(t *Tx) (missing, stray [][]byte, damaged []error) {
		missing, stray, _, damaged = t.profileRefsDiff()
		return missing, stray, damaged
	},
	reindex: (*Tx).reindexProfileRefs,
}

// runEnds is the values of bucketRunsByEnd as a format raise fills them: each names its
// run's node and, for a run of a stored version, the version (runEndValue).
var runEnds = derivedIndex{
	diff: func(t *Tx) (missing, stray [][]byte, damaged []error) {
		_, _, missing, damaged = t.profileRefsDiff()
		return missing, nil, damaged
	},
	reindex: (*Tx).reindexRunEnds,
}

// indexProfileRefs is the raise to format 6 of what refers to the profile versions: it
// writes the entries of bucketProfileRefs of the runs and nodes a store of format 5
// holds, and the version's key in the values of bucketRunsByEnd, MaxPruned a
// transaction, each read again there; the transaction that raises the format does it
// again (finalProfileRefs), so that no run a replica of format 5 created or ended
// meanwhile is left without, which a prune of its deleted version would not see.
func (s *Store) indexProfileRefs() error {
	if err := s.fill(profileRefs); err != nil {
		return err
	}
	return s.fill(runEnds)
}

// finalProfileRefs is indexProfileRefs in the transaction that raises the format
// (fillLast).
func (t *Tx) finalProfileRefs() error {
	if err := t.fillLast(profileRefs); err != nil {
		return err
	}
	return t.fillLast(runEnds)
}
