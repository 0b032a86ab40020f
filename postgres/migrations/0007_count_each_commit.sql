-- Each store's writer counts its commits, in the transaction of each one,
-- so that a commit whose connection dropped during COMMIT can be found to
-- have landed or not: the count says so once that transaction is over,
-- and a reader that locks the row waits for its end. A store's row is
-- made when it opens and goes when it closes.
CREATE TABLE writers (
	id      text   PRIMARY KEY,
	commits bigint NOT NULL
);
