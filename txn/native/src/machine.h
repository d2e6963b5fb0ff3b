/* The manager's state in C: the same state and primitive transitions as txn/machine.py
 * (TxStateMachine), for the native engine. Every function requires the GIL: the GIL and the
 * manager's lock are what serialise access (see docs/txn.md, "The native engine").
 */
#ifndef TXN_NATIVE_MACHINE_H
#define TXN_NATIVE_MACHINE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "changeset.h"

#define NO_TX_IN_PROGRESS INT64_MAX

/* In-progress entry kinds: txn.state.InProgressType values. */
enum { IP_SHORT = 0, IP_LONG = 1, IP_CHECKPOINT = 2 };

typedef struct {
    int64_t wp;
    int64_t vub;
    int64_t expiration;
    int type;
    int64_t *cps; /* checkpoint write pointers, in order; malloc'd */
    Py_ssize_t ncps;
    PyObject *client; /* owned str, or NULL */
} Entry;

typedef struct {
    int64_t id;
    ChangeSet *set;
} SetSlot;

typedef struct {
    PyObject_HEAD
    int64_t read_pointer;
    int64_t last_write_pointer;
    Entry *ip; /* in progress, ascending by wp */
    Py_ssize_t nip, capip;
    int64_t *invalid; /* ascending, unique */
    Py_ssize_t ninvalid, capinvalid;
    SetSlot *committing; /* ascending by transaction id */
    Py_ssize_t ncommitting, capcommitting;
    SetSlot *committed; /* [cstart, cend) ascending by commit pointer */
    Py_ssize_t cstart, cend, capcommitted;
    PyObject *ids_tuple;     /* cached tuple of in-progress ids, or NULL */
    PyObject *invalid_tuple; /* cached tuple of invalid ids, or NULL */
} Machine;

extern PyTypeObject MachineType;

/* -- queries ----------------------------------------------------------------------- */

Py_ssize_t machine_find(const Machine *m, int64_t wp); /* index in ip, or -1 */
int64_t machine_first_short(const Machine *m);
int64_t machine_next_write_pointer(const Machine *m, int64_t now_ms);
/* Whether a set committed after `tx_id` shares a key with `cs`: 1 with the first such set's
 * smallest shared key (*key, *len) and its client (borrowed, maybe NULL), else 0. */
int machine_find_conflict(const Machine *m, int64_t tx_id, const ChangeSet *cs,
                          const unsigned char **key, size_t *len, PyObject **client);
/* The same, for a Python set of bytes, looked up by hash: cheaper than sorting a large
 * candidate set when the committed keys after tx_id are fewer. -1 with an exception. */
int machine_find_conflict_in(const Machine *m, int64_t tx_id, PyObject *keys,
                             const unsigned char **key, size_t *len, PyObject **client);
/* How many keys the sets committed after tx_id hold. */
Py_ssize_t machine_committed_keys_after(const Machine *m, int64_t tx_id);
SetSlot *machine_committing(const Machine *m, int64_t tx_id);

/* -- transitions (txn/machine.py's do_* methods); 0, or -1 with an exception --------- */

int machine_start(Machine *m, int64_t wp, int64_t vub, int64_t expiration, int type,
                  PyObject *client);
/* Takes ownership of `cs`, even on failure. */
int machine_committing_set(Machine *m, int64_t tx_id, ChangeSet *cs);
/* do_commit: drops the transaction's committing set and, when `add` and `changes` is not
 * empty, records `changes` as committed under `commit_pointer` with the dropped set's
 * client. Takes ownership of `changes` (NULL: none); COMMITTING_SET stands for the
 * transaction's own committing set. */
#define COMMITTING_SET ((ChangeSet *)1)
int machine_commit(Machine *m, int64_t tx_id, ChangeSet *changes, int64_t commit_pointer,
                   int add);
/* do_invalidate: 1 when invalidated, 0 when committed or unknown, -1 on error. */
int machine_invalidate(Machine *m, int64_t tx_id);
/* do_abort; `type` is IP_SHORT, IP_LONG or -1 (not known: an edit of codec V2). */
int machine_abort(Machine *m, int64_t tx_id, const int64_t *cps, Py_ssize_t ncps, int type);
/* do_checkpoint: 0, 1 when the parent is not in progress (nothing changed), -1 on error. */
int machine_checkpoint(Machine *m, int64_t new_wp, int64_t parent_wp);
/* Set the expiration of in-progress transaction tx_id (not of a checkpoint). */
void machine_extend(Machine *m, int64_t tx_id, int64_t expiration);
/* Remove one invalid id; 1 when it was there. */
int machine_invalid_remove(Machine *m, int64_t id);
/* do_truncate_invalid_before: remove invalid ids started before time_ms; 1 if any. */
int machine_truncate_before(Machine *m, int64_t time_ms);
int machine_is_invalid(const Machine *m, int64_t id);
int machine_in_progress_before(const Machine *m, int64_t wp);
/* Forget everything (pointers back to 0). */
void machine_clear(Machine *m);
/* restore: set the committed change set at `pointer` (takes `cs`, even on failure). */
int machine_restore_committed(Machine *m, int64_t pointer, ChangeSet *cs);
/* restore: append an in-progress entry (ascending wps; takes `cps`, even on failure). */
int machine_restore_entry(Machine *m, Entry e);
int machine_restore_invalid(Machine *m, int64_t id);

#endif
