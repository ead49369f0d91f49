-- FARM_FINGERPRINT for generated key columns (a queue's `k INT64 AS
-- (MOD(ABS(FARM_FINGERPRINT(id)), 16)) STORED`, and the Spanner front-end's
-- SELECTs): FarmHash's Fingerprint64 of the bytes, as Spanner's signed INT64,
-- so that a shard computed here is the shard Spanner computes. IMMUTABLE, so a
-- GENERATED ALWAYS AS (...) STORED column may call it and every writer (psql
-- too) gets the value computed.
--
-- PostgreSQL has no unsigned 64-bit integer: a value is the bigint of the same
-- 64 bits. Bit operations work on that bigint as they are, but for the logical
-- right shift (>> is arithmetic: the sign is masked off); addition and
-- multiplication go through numeric and are taken modulo 2^64 (the signed
-- product and sum are congruent to the unsigned ones).
--
-- A key column's generation expression is in its catalog entry
-- (spanq.queues.key_columns: "generated_as", as declared, and "generated_sql",
-- its PostgreSQL): the catalog's jsonb needs no new column.

CREATE FUNCTION spanq.farmhash_wrap(n numeric) RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT (CASE WHEN m >= 9223372036854775808 THEN m - 18446744073709551616 ELSE m END)::bigint
    FROM (SELECT CASE WHEN r < 0 THEN r + 18446744073709551616 ELSE r END AS m
          FROM (SELECT mod(n, 18446744073709551616) AS r) AS a) AS b
$$;

CREATE FUNCTION spanq.farmhash_add(a bigint, b bigint) RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$ SELECT spanq.farmhash_wrap(a::numeric + b::numeric) $$;

CREATE FUNCTION spanq.farmhash_mul(a bigint, b bigint) RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$ SELECT spanq.farmhash_wrap(a::numeric * b::numeric) $$;

-- The logical right shift by n (1 to 63): the arithmetic one with the copied sign bits cleared.
CREATE FUNCTION spanq.farmhash_shr(a bigint, n integer) RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$ SELECT (a >> n) & ~((-1)::bigint << (64 - n)) $$;

-- Rotation right by n (1 to 63).
CREATE FUNCTION spanq.farmhash_rot(a bigint, n integer) RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$ SELECT spanq.farmhash_shr(a, n) | (a << (64 - n)) $$;

CREATE FUNCTION spanq.farmhash_shift_mix(v bigint) RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$ SELECT v # spanq.farmhash_shr(v, 47) $$;

-- The little-endian 64-bit word at byte offset ``at`` (from 0).
CREATE FUNCTION spanq.farmhash_fetch64(s bytea, at integer) RETURNS bigint
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
    r bigint := 0;
BEGIN
    FOR i IN REVERSE 7..0 LOOP
        r := (r << 8) | get_byte(s, at + i);
    END LOOP;
    RETURN r;
END
$$;

CREATE FUNCTION spanq.farmhash_fetch32(s bytea, at integer) RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT get_byte(s, at)::bigint | (get_byte(s, at + 1)::bigint << 8) | (get_byte(s, at + 2)::bigint << 16)
           | (get_byte(s, at + 3)::bigint << 24)
$$;

-- Two words hashed into one with a multiplier.
CREATE FUNCTION spanq.farmhash_len16(u bigint, v bigint, mul bigint) RETURNS bigint
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
    a bigint := spanq.farmhash_mul(u # v, mul);
    b bigint;
BEGIN
    a := a # spanq.farmhash_shr(a, 47);
    b := spanq.farmhash_mul(v # a, mul);
    b := b # spanq.farmhash_shr(b, 47);
    RETURN spanq.farmhash_mul(b, mul);
END
$$;

-- Four words and two seeds into two words (the long inputs' inner step): (a, b).
CREATE FUNCTION spanq.farmhash_weak32(s bytea, at integer, a bigint, b bigint, OUT first bigint, OUT second bigint)
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
    w bigint := spanq.farmhash_fetch64(s, at);
    x bigint := spanq.farmhash_fetch64(s, at + 8);
    y bigint := spanq.farmhash_fetch64(s, at + 16);
    z bigint := spanq.farmhash_fetch64(s, at + 24);
    c bigint;
BEGIN
    a := spanq.farmhash_add(a, w);
    b := spanq.farmhash_rot(spanq.farmhash_add(spanq.farmhash_add(b, a), z), 21);
    c := a;
    a := spanq.farmhash_add(spanq.farmhash_add(a, x), y);
    b := spanq.farmhash_add(b, spanq.farmhash_rot(a, 44));
    first := spanq.farmhash_add(a, z);
    second := spanq.farmhash_add(b, c);
END
$$;

CREATE FUNCTION spanq.farm_fingerprint(s bytea) RETURNS bigint
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
    k0 CONSTANT bigint := -4348849565147123417;  -- 0xc3a5c85c97cb3127
    k1 CONSTANT bigint := -5435081209227447693;  -- 0xb492b66fbe98f273
    k2 CONSTANT bigint := -7286425919675154353;  -- 0x9ae16a3b2f90404f
    len CONSTANT integer := length(s);
    mul bigint;
    a bigint; b bigint; c bigint; d bigint; e bigint; f bigint; g bigint; h bigint;
    x bigint; y bigint; z bigint; t bigint;
    v1 bigint := 0; v2 bigint := 0; w1 bigint := 0; w2 bigint := 0;
    at integer := 0;
    last_at integer;
    stop integer;
BEGIN
    IF len <= 16 THEN
        IF len >= 8 THEN
            mul := spanq.farmhash_add(k2, len * 2);
            a := spanq.farmhash_add(spanq.farmhash_fetch64(s, 0), k2);
            b := spanq.farmhash_fetch64(s, len - 8);
            c := spanq.farmhash_add(spanq.farmhash_mul(spanq.farmhash_rot(b, 37), mul), a);
            d := spanq.farmhash_mul(spanq.farmhash_add(spanq.farmhash_rot(a, 25), b), mul);
            RETURN spanq.farmhash_len16(c, d, mul);
        END IF;
        IF len >= 4 THEN
            mul := spanq.farmhash_add(k2, len * 2);
            RETURN spanq.farmhash_len16(len + (spanq.farmhash_fetch32(s, 0) << 3), spanq.farmhash_fetch32(s, len - 4),
                                        mul);
        END IF;
        IF len > 0 THEN
            -- y and z are 32-bit sums of small values: they cannot overflow.
            y := get_byte(s, 0) + (get_byte(s, len >> 1)::bigint << 8);
            z := len + (get_byte(s, len - 1)::bigint << 2);
            RETURN spanq.farmhash_mul(spanq.farmhash_shift_mix(spanq.farmhash_mul(y, k2) # spanq.farmhash_mul(z, k0)),
                                      k2);
        END IF;
        RETURN k2;
    END IF;
    IF len <= 32 THEN
        mul := spanq.farmhash_add(k2, len * 2);
        a := spanq.farmhash_mul(spanq.farmhash_fetch64(s, 0), k1);
        b := spanq.farmhash_fetch64(s, 8);
        c := spanq.farmhash_mul(spanq.farmhash_fetch64(s, len - 8), mul);
        d := spanq.farmhash_mul(spanq.farmhash_fetch64(s, len - 16), k2);
        RETURN spanq.farmhash_len16(
            spanq.farmhash_add(spanq.farmhash_add(spanq.farmhash_rot(spanq.farmhash_add(a, b), 43),
                                                  spanq.farmhash_rot(c, 30)), d),
            spanq.farmhash_add(spanq.farmhash_add(a, spanq.farmhash_rot(spanq.farmhash_add(b, k2), 18)), c),
            mul);
    END IF;
    IF len <= 64 THEN
        mul := spanq.farmhash_add(k2, len * 2);
        a := spanq.farmhash_mul(spanq.farmhash_fetch64(s, 0), k2);
        b := spanq.farmhash_fetch64(s, 8);
        c := spanq.farmhash_mul(spanq.farmhash_fetch64(s, len - 8), mul);
        d := spanq.farmhash_mul(spanq.farmhash_fetch64(s, len - 16), k2);
        y := spanq.farmhash_add(spanq.farmhash_add(spanq.farmhash_rot(spanq.farmhash_add(a, b), 43),
                                                   spanq.farmhash_rot(c, 30)), d);
        z := spanq.farmhash_len16(
            y, spanq.farmhash_add(spanq.farmhash_add(a, spanq.farmhash_rot(spanq.farmhash_add(b, k2), 18)), c), mul);
        e := spanq.farmhash_mul(spanq.farmhash_fetch64(s, 16), mul);
        f := spanq.farmhash_fetch64(s, 24);
        g := spanq.farmhash_mul(spanq.farmhash_add(y, spanq.farmhash_fetch64(s, len - 32)), mul);
        h := spanq.farmhash_mul(spanq.farmhash_add(z, spanq.farmhash_fetch64(s, len - 24)), mul);
        RETURN spanq.farmhash_len16(
            spanq.farmhash_add(spanq.farmhash_add(spanq.farmhash_rot(spanq.farmhash_add(e, f), 43),
                                                  spanq.farmhash_rot(g, 30)), h),
            spanq.farmhash_add(spanq.farmhash_add(e, spanq.farmhash_rot(spanq.farmhash_add(f, a), 18)), g),
            mul);
    END IF;
    -- Longer: 64-byte blocks, then the last 64 bytes, from the seed 81.
    x := 81;
    y := spanq.farmhash_add(spanq.farmhash_mul(81, k1), 113);
    z := spanq.farmhash_mul(spanq.farmhash_shift_mix(spanq.farmhash_add(spanq.farmhash_mul(y, k2), 113)), k2);
    x := spanq.farmhash_add(spanq.farmhash_mul(x, k2), spanq.farmhash_fetch64(s, 0));
    stop := ((len - 1) / 64) * 64;
    last_at := stop + ((len - 1) & 63) - 63;
    LOOP
        x := spanq.farmhash_mul(spanq.farmhash_rot(spanq.farmhash_add(spanq.farmhash_add(spanq.farmhash_add(x, y), v1),
                                                                      spanq.farmhash_fetch64(s, at + 8)), 37), k1);
        y := spanq.farmhash_mul(spanq.farmhash_rot(spanq.farmhash_add(spanq.farmhash_add(y, v2),
                                                                      spanq.farmhash_fetch64(s, at + 48)), 42), k1);
        x := x # w2;
        y := spanq.farmhash_add(y, spanq.farmhash_add(v1, spanq.farmhash_fetch64(s, at + 40)));
        z := spanq.farmhash_mul(spanq.farmhash_rot(spanq.farmhash_add(z, w1), 33), k1);
        SELECT r.first, r.second INTO v1, v2
        FROM spanq.farmhash_weak32(s, at, spanq.farmhash_mul(v2, k1), spanq.farmhash_add(x, w1)) AS r;
        SELECT r.first, r.second INTO w1, w2
        FROM spanq.farmhash_weak32(s, at + 32, spanq.farmhash_add(z, w2),
                                   spanq.farmhash_add(y, spanq.farmhash_fetch64(s, at + 16))) AS r;
        t := z; z := x; x := t;
        at := at + 64;
        EXIT WHEN at = stop;
    END LOOP;
    mul := spanq.farmhash_add(k1, (z & 255) << 1);
    at := last_at;
    w1 := spanq.farmhash_add(w1, (len - 1) & 63);
    v1 := spanq.farmhash_add(v1, w1);
    w1 := spanq.farmhash_add(w1, v1);
    x := spanq.farmhash_mul(spanq.farmhash_rot(spanq.farmhash_add(spanq.farmhash_add(spanq.farmhash_add(x, y), v1),
                                                                  spanq.farmhash_fetch64(s, at + 8)), 37), mul);
    y := spanq.farmhash_mul(spanq.farmhash_rot(spanq.farmhash_add(spanq.farmhash_add(y, v2),
                                                                  spanq.farmhash_fetch64(s, at + 48)), 42), mul);
    x := x # spanq.farmhash_mul(w2, 9);
    y := spanq.farmhash_add(y, spanq.farmhash_add(spanq.farmhash_mul(v1, 9), spanq.farmhash_fetch64(s, at + 40)));
    z := spanq.farmhash_mul(spanq.farmhash_rot(spanq.farmhash_add(z, w1), 33), mul);
    SELECT r.first, r.second INTO v1, v2
    FROM spanq.farmhash_weak32(s, at, spanq.farmhash_mul(v2, mul), spanq.farmhash_add(x, w1)) AS r;
    SELECT r.first, r.second INTO w1, w2
    FROM spanq.farmhash_weak32(s, at + 32, spanq.farmhash_add(z, w2),
                               spanq.farmhash_add(y, spanq.farmhash_fetch64(s, at + 16))) AS r;
    t := z; z := x; x := t;
    RETURN spanq.farmhash_len16(
        spanq.farmhash_add(spanq.farmhash_add(spanq.farmhash_len16(v1, w1, mul),
                                              spanq.farmhash_mul(spanq.farmhash_shift_mix(y), k0)), z),
        spanq.farmhash_add(spanq.farmhash_len16(v2, w2, mul), x),
        mul);
END
$$;

-- A STRING's fingerprint is its UTF-8 bytes' (the database's encoding is UTF-8).
CREATE FUNCTION spanq.farm_fingerprint(s text) RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$ SELECT spanq.farm_fingerprint(convert_to(s, 'UTF8')) $$;
