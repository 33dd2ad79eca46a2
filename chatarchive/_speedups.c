/*
 * A text's search terms and their tsvector input, in one pass each.
 *
 * The same terms as chatarchive._terms.Tokenizer.terms finds with numpy and
 * Python (a property test holds the two to each other and to the
 * piece-by-piece reference), from the same tables: each character's kind
 * (chatarchive._scan) and what normalization (NFKC) and case folding make of
 * it. A text with anything those tables do not settle on their own (a
 * character whose normalization depends on its neighbours, a CJK character
 * that normalization changes, a character of a block not yet looked at) is
 * answered with None, and Python finds its terms.
 *
 * Every function runs holding the GIL and touches Python objects only
 * through the C API, so a tokenizer stays safe to share between threads.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* A character's kind, as chatarchive._scan writes it. */
#define KIND_WORD 1
#define KIND_CJK 2
#define KIND_PICTOGRAPH 4
#define KIND_UNUSUAL 16

/* What a letter or digit becomes in a term, as chatarchive._scan writes it:
 * one character (its code in the low bits), a string of fold_strings, or
 * (0) nothing known on its own. */
#define FOLD_ONE (1u << 24)
#define FOLD_STRING (1u << 25)
#define FOLD_CODE 0x1FFFFFu

#define BLOCK_BITS 8
#define CODES 0x110000

static Py_buffer kinds_view, known_view, folds_view;
static PyObject *fold_strings = NULL; /* dict: code point -> str */
static int configured = 0;
static Py_ssize_t max_terms = 16383, max_characters = 128, max_positions = 256;

static void
release_tables(void)
{
    if (configured) {
        PyBuffer_Release(&kinds_view);
        PyBuffer_Release(&known_view);
        PyBuffer_Release(&folds_view);
        Py_CLEAR(fold_strings);
        configured = 0;
    }
}

static PyObject *
configure(PyObject *module, PyObject *args)
{
    (void)module;
    PyObject *kinds, *known, *folds, *strings;
    Py_ssize_t terms, characters, positions;
    if (!PyArg_ParseTuple(args, "OOOO!nnn", &kinds, &known, &folds, &PyDict_Type, &strings, &terms,
                          &characters, &positions))
        return NULL;
    Py_buffer k, n, f;
    if (PyObject_GetBuffer(kinds, &k, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    if (PyObject_GetBuffer(known, &n, PyBUF_C_CONTIGUOUS) < 0) {
        PyBuffer_Release(&k);
        return NULL;
    }
    if (PyObject_GetBuffer(folds, &f, PyBUF_C_CONTIGUOUS) < 0) {
        PyBuffer_Release(&k);
        PyBuffer_Release(&n);
        return NULL;
    }
    if (k.len != CODES || n.len != (CODES >> BLOCK_BITS) || f.len != (Py_ssize_t)(CODES * sizeof(uint32_t))) {
        PyBuffer_Release(&k);
        PyBuffer_Release(&n);
        PyBuffer_Release(&f);
        PyErr_SetString(PyExc_ValueError, "the character tables have the wrong sizes");
        return NULL;
    }
    release_tables();
    kinds_view = k;
    known_view = n;
    folds_view = f;
    Py_INCREF(strings);
    fold_strings = strings;
    max_terms = terms;
    max_characters = characters;
    max_positions = positions;
    configured = 1;
    Py_RETURN_NONE;
}

/* A growable buffer of code points. */
typedef struct {
    Py_UCS4 *codes;
    Py_ssize_t length, size;
} Codes;

static int
codes_reserve(Codes *buffer, Py_ssize_t more)
{
    if (buffer->length + more <= buffer->size)
        return 0;
    Py_ssize_t size = buffer->size ? buffer->size : 64;
    while (size < buffer->length + more)
        size *= 2;
    Py_UCS4 *codes = PyMem_Realloc(buffer->codes, size * sizeof(Py_UCS4));
    if (codes == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    buffer->codes = codes;
    buffer->size = size;
    return 0;
}

/* Appends the term of the word text[start:end] (its characters folded) to
 * buffer. 1: done; 0: a character not settled on its own; -1: an error. */
static int
fold_word(Codes *buffer, int kind, const void *data, Py_ssize_t start, Py_ssize_t end)
{
    const uint32_t *folds = folds_view.buf;
    buffer->length = 0;
    if (codes_reserve(buffer, end - start) < 0)
        return -1;
    for (Py_ssize_t at = start; at < end; at++) {
        Py_UCS4 code = PyUnicode_READ(kind, data, at);
        uint32_t fold = folds[code];
        if (fold & FOLD_ONE) {
            buffer->codes[buffer->length++] = fold & FOLD_CODE;
        }
        else if (fold & FOLD_STRING) {
            PyObject *key = PyLong_FromUnsignedLong(code);
            if (key == NULL)
                return -1;
            PyObject *string = PyDict_GetItemWithError(fold_strings, key);
            Py_DECREF(key);
            if (string == NULL)
                return PyErr_Occurred() ? -1 : 0;
            Py_ssize_t length = PyUnicode_GET_LENGTH(string);
            if (codes_reserve(buffer, length + (end - at)) < 0)
                return -1;
            int string_kind = PyUnicode_KIND(string);
            const void *string_data = PyUnicode_DATA(string);
            for (Py_ssize_t i = 0; i < length; i++)
                buffer->codes[buffer->length++] = PyUnicode_READ(string_kind, string_data, i);
        }
        else {
            return 0;
        }
    }
    return 1;
}

/* terms(text, pairs, stems, stem) -> list[str] | None
 *
 * The terms of text (in NFC): each run of letters and digits as its folded
 * word stemmed (stems: a dict of the stems known; stem: called once with the
 * words it lacks, returns their stems as a dict; stems None: not stemmed),
 * each pair of CJK characters in a row (pairs true; else each CJK
 * character), each pictograph; at most max_terms. None: Python's to find. */
static PyObject *
terms(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "terms takes text, pairs, stems and stem");
        return NULL;
    }
    if (!configured) {
        PyErr_SetString(PyExc_RuntimeError, "the character tables are not configured");
        return NULL;
    }
    PyObject *text = args[0], *stems = args[2], *stem = args[3];
    int pairs = PyObject_IsTrue(args[1]);
    if (pairs < 0)
        return NULL;
    if (!PyUnicode_Check(text)) {
        PyErr_SetString(PyExc_TypeError, "text must be a str");
        return NULL;
    }
    if (stems != Py_None && !PyDict_Check(stems)) {
        PyErr_SetString(PyExc_TypeError, "stems must be a dict or None");
        return NULL;
    }
    const uint8_t *kinds = kinds_view.buf, *known = known_view.buf;
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    Py_ssize_t length = PyUnicode_GET_LENGTH(text);

    PyObject *found = PyList_New(0);
    PyObject *missing = NULL;   /* the words with no stem known, in order */
    PyObject *slots = NULL;     /* their places in found */
    Codes word = {NULL, 0, 0};
    if (found == NULL)
        return NULL;

    Py_ssize_t at = 0;
    int previous = 0; /* the kind of the character before at */
    while (at < length && PyList_GET_SIZE(found) < max_terms) {
        Py_UCS4 code = PyUnicode_READ(kind, data, at);
        if (code >= 0x10000 && !known[code >> BLOCK_BITS])
            goto python; /* a block not looked at yet */
        int flags = kinds[code];
        if (flags & KIND_WORD) {
            Py_ssize_t end = at + 1;
            while (end < length) {
                Py_UCS4 next = PyUnicode_READ(kind, data, end);
                if (next >= 0x10000 && !known[next >> BLOCK_BITS])
                    goto python;
                if (!(kinds[next] & KIND_WORD))
                    break;
                end++;
            }
            int folded = fold_word(&word, kind, data, at, end);
            if (folded < 0)
                goto error;
            if (folded == 0)
                goto python;
            previous = KIND_WORD;
            at = end;
            if (word.length == 0 || word.length > max_characters)
                continue; /* emptied by normalization, or too long to be a term */
            PyObject *term = PyUnicode_FromKindAndData(PyUnicode_4BYTE_KIND, word.codes, word.length);
            if (term == NULL)
                goto error;
            if (stems != Py_None) {
                PyObject *stemmed = PyDict_GetItemWithError(stems, term);
                if (stemmed != NULL) {
                    Py_INCREF(stemmed);
                    Py_SETREF(term, stemmed);
                }
                else if (PyErr_Occurred()) {
                    Py_DECREF(term);
                    goto error;
                }
                else {
                    PyObject *slot = PyLong_FromSsize_t(PyList_GET_SIZE(found));
                    if ((missing == NULL && (missing = PyList_New(0)) == NULL) ||
                        (slots == NULL && (slots = PyList_New(0)) == NULL) || slot == NULL ||
                        PyList_Append(missing, term) < 0 || PyList_Append(slots, slot) < 0) {
                        Py_XDECREF(slot);
                        Py_DECREF(term);
                        goto error;
                    }
                    Py_DECREF(slot);
                }
            }
            int appended = PyList_Append(found, term);
            Py_DECREF(term);
            if (appended < 0)
                goto error;
            continue;
        }
        if (flags & KIND_CJK) {
            if (flags & KIND_UNUSUAL)
                goto python;
            Py_ssize_t take = 1;
            if (pairs) {
                int next_cjk = 0;
                if (at + 1 < length) {
                    Py_UCS4 next = PyUnicode_READ(kind, data, at + 1);
                    if (next >= 0x10000 && !known[next >> BLOCK_BITS])
                        goto python;
                    next_cjk = (kinds[next] & KIND_CJK) != 0;
                }
                if (next_cjk)
                    take = 2;
                else if (previous == KIND_CJK)
                    take = 0; /* the second of the last pair */
            }
            if (take) {
                PyObject *term = PyUnicode_Substring(text, at, at + take);
                if (term == NULL || PyList_Append(found, term) < 0) {
                    Py_XDECREF(term);
                    goto error;
                }
                Py_DECREF(term);
            }
            previous = KIND_CJK;
            at++;
            continue;
        }
        if (flags & KIND_PICTOGRAPH) {
            PyObject *term = PyUnicode_Substring(text, at, at + 1);
            if (term == NULL || PyList_Append(found, term) < 0) {
                Py_XDECREF(term);
                goto error;
            }
            Py_DECREF(term);
        }
        previous = flags & KIND_PICTOGRAPH;
        at++;
    }
    PyMem_Free(word.codes);
    word.codes = NULL;

    if (missing != NULL) {
        PyObject *stemmed = PyObject_CallOneArg(stem, missing);
        if (stemmed == NULL)
            goto error;
        if (!PyDict_Check(stemmed)) {
            Py_DECREF(stemmed);
            PyErr_SetString(PyExc_TypeError, "stem must return a dict");
            goto error;
        }
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(missing); i++) {
            PyObject *stem_of = PyDict_GetItemWithError(stemmed, PyList_GET_ITEM(missing, i));
            if (stem_of == NULL) {
                if (!PyErr_Occurred())
                    PyErr_SetString(PyExc_KeyError, "stem left out a word");
                Py_DECREF(stemmed);
                goto error;
            }
            Py_ssize_t slot = PyLong_AsSsize_t(PyList_GET_ITEM(slots, i));
            Py_INCREF(stem_of);
            PyList_SetItem(found, slot, stem_of);
        }
        Py_DECREF(stemmed);
        Py_DECREF(missing);
        Py_DECREF(slots);
    }
    return found;

python:
    PyMem_Free(word.codes);
    Py_DECREF(found);
    Py_XDECREF(missing);
    Py_XDECREF(slots);
    Py_RETURN_NONE;
error:
    PyMem_Free(word.codes);
    Py_DECREF(found);
    Py_XDECREF(missing);
    Py_XDECREF(slots);
    return NULL;
}

static Py_ssize_t
digits(Py_ssize_t number)
{
    Py_ssize_t count = 1;
    while (number >= 10) {
        number /= 10;
        count++;
    }
    return count;
}

static Py_ssize_t
write_number(int kind, void *data, Py_ssize_t at, Py_ssize_t number)
{
    char reversed[24];
    int count = 0;
    do {
        reversed[count++] = (char)('0' + number % 10);
        number /= 10;
    } while (number);
    while (count)
        PyUnicode_WRITE(kind, data, at++, (Py_UCS4)reversed[--count]);
    return at;
}

static int
same_text(PyObject *one, PyObject *other)
{
    if (one == other)
        return 1;
    Py_ssize_t length = PyUnicode_GET_LENGTH(one);
    return length == PyUnicode_GET_LENGTH(other) && PyUnicode_KIND(one) == PyUnicode_KIND(other) &&
           memcmp(PyUnicode_DATA(one), PyUnicode_DATA(other), length * PyUnicode_KIND(one)) == 0;
}

/* tsvector_literal(terms) -> str
 *
 * terms with their positions (from 1) as PostgreSQL's tsvector input:
 * "'term':1,3 'other':2", each term once, in the order it first comes, with
 * at most max_positions positions. Terms hold letters and digits only:
 * nothing to escape. */
static PyObject *
tsvector_literal(PyObject *module, PyObject *list)
{
    (void)module;
    if (!PyList_Check(list)) {
        PyErr_SetString(PyExc_TypeError, "terms must be a list");
        return NULL;
    }
    Py_ssize_t count = PyList_GET_SIZE(list);
    if (count > max_terms)
        count = max_terms;
    if (count == 0)
        return PyUnicode_New(0, 0);
    Py_ssize_t capacity = 16;
    while (capacity < 2 * count)
        capacity *= 2;
    /* An open-addressing table of the distinct terms (their numbers, -1:
     * free); for each distinct term: its first and last position and how
     * many are kept; for each position: the next kept one of its term. */
    Py_ssize_t *table = PyMem_Malloc(capacity * sizeof(Py_ssize_t));
    Py_hash_t *hashes = PyMem_Malloc(count * sizeof(Py_hash_t));
    Py_ssize_t *first = PyMem_Malloc(count * sizeof(Py_ssize_t));
    Py_ssize_t *last = PyMem_Malloc(count * sizeof(Py_ssize_t));
    Py_ssize_t *kept = PyMem_Malloc(count * sizeof(Py_ssize_t));
    Py_ssize_t *next = PyMem_Malloc(count * sizeof(Py_ssize_t));
    PyObject *result = NULL;
    if (table == NULL || hashes == NULL || first == NULL || last == NULL || kept == NULL || next == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t slot = 0; slot < capacity; slot++)
        table[slot] = -1;
    Py_ssize_t distinct = 0, size = 0;
    Py_UCS4 widest = 127;
    for (Py_ssize_t position = 0; position < count; position++) {
        PyObject *term = PyList_GET_ITEM(list, position);
        if (!PyUnicode_Check(term)) {
            PyErr_SetString(PyExc_TypeError, "terms must be str");
            goto done;
        }
        Py_hash_t hash = PyObject_Hash(term);
        if (hash == -1)
            goto done;
        next[position] = -1;
        size_t slot = (size_t)hash & (size_t)(capacity - 1);
        Py_ssize_t which;
        while ((which = table[slot]) >= 0 &&
               (hashes[which] != hash || !same_text(PyList_GET_ITEM(list, first[which]), term)))
            slot = (slot + 1) & (size_t)(capacity - 1);
        if (which < 0) {
            which = table[slot] = distinct++;
            hashes[which] = hash;
            first[which] = last[which] = position;
            kept[which] = 1;
            Py_UCS4 top = PyUnicode_MAX_CHAR_VALUE(term);
            if (top > widest)
                widest = top;
            /* 'term': and its position, with a space before all but the first */
            size += PyUnicode_GET_LENGTH(term) + 3 + (which ? 1 : 0) + digits(position + 1);
            continue;
        }
        if (kept[which] == max_positions)
            continue;
        next[last[which]] = position;
        last[which] = position;
        kept[which]++;
        size += 1 + digits(position + 1);
    }
    result = PyUnicode_New(size, widest);
    if (result == NULL)
        goto done;
    int kind = PyUnicode_KIND(result);
    void *data = PyUnicode_DATA(result);
    Py_ssize_t at = 0;
    for (Py_ssize_t which = 0; which < distinct; which++) {
        PyObject *term = PyList_GET_ITEM(list, first[which]);
        if (which)
            PyUnicode_WRITE(kind, data, at++, ' ');
        PyUnicode_WRITE(kind, data, at++, '\'');
        Py_ssize_t length = PyUnicode_GET_LENGTH(term);
        if (PyUnicode_CopyCharacters(result, at, term, 0, length) < 0) {
            Py_CLEAR(result);
            goto done;
        }
        at += length;
        PyUnicode_WRITE(kind, data, at++, '\'');
        PyUnicode_WRITE(kind, data, at++, ':');
        for (Py_ssize_t position = first[which]; position >= 0; position = next[position]) {
            if (position != first[which])
                PyUnicode_WRITE(kind, data, at++, ',');
            at = write_number(kind, data, at, position + 1);
        }
    }
done:
    PyMem_Free(table);
    PyMem_Free(hashes);
    PyMem_Free(first);
    PyMem_Free(last);
    PyMem_Free(kept);
    PyMem_Free(next);
    return result;
}

static PyMethodDef methods[] = {
    {"configure", configure, METH_VARARGS,
     "configure(kinds, known, folds, fold_strings, max_terms, max_characters, max_positions): the tables."},
    {"terms", (PyCFunction)(void (*)(void))terms, METH_FASTCALL,
     "terms(text, pairs, stems, stem) -> list[str] | None: a text's terms."},
    {"tsvector_literal", tsvector_literal, METH_O,
     "tsvector_literal(terms) -> str: terms with their positions as tsvector input."},
    {NULL, NULL, 0, NULL},
};

static void
free_module(void *module)
{
    (void)module;
    release_tables();
}

static struct PyModuleDef module_definition = {
    PyModuleDef_HEAD_INIT, "_speedups", "A text's search terms, in C.", -1, methods,
    NULL, NULL, NULL, free_module,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    return PyModule_Create(&module_definition);
}
