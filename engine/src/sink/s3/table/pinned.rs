//! A catalog that commits onto one snapshot only.
//!
//! iceberg-rust's `Transaction::commit` reads the table again before it applies its actions and
//! retries a commit that conflicted on a fresh read. The committer checks its files against one
//! read of the table (the offsets its snapshot summary records) and must not have them land on
//! any other: through this wrapper the transaction's read returns that very table, so the
//! append's requirement is its snapshot, and a conflict comes back at once, not retried, for the
//! committer to read the table and check its files again.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use iceberg::table::Table;
use iceberg::{
    Catalog, Error, ErrorKind, Namespace, NamespaceIdent, Result, TableCommit, TableCreation,
    TableIdent,
};

#[derive(Debug)]
pub(super) struct Pinned {
    pub(super) inner: Arc<dyn Catalog>,
    /// The table as the committer checked it.
    pub(super) table: Table,
}

#[async_trait]
impl Catalog for Pinned {
    async fn list_namespaces(
        &self,
        parent: Option<&NamespaceIdent>,
    ) -> Result<Vec<NamespaceIdent>> {
        self.inner.list_namespaces(parent).await
    }

    async fn create_namespace(
        &self,
        namespace: &NamespaceIdent,
        properties: HashMap<String, String>,
    ) -> Result<Namespace> {
        self.inner.create_namespace(namespace, properties).await
    }

    async fn get_namespace(&self, namespace: &NamespaceIdent) -> Result<Namespace> {
        self.inner.get_namespace(namespace).await
    }

    async fn namespace_exists(&self, namespace: &NamespaceIdent) -> Result<bool> {
        self.inner.namespace_exists(namespace).await
    }

    async fn update_namespace(
        &self,
        namespace: &NamespaceIdent,
        properties: HashMap<String, String>,
    ) -> Result<()> {
        self.inner.update_namespace(namespace, properties).await
    }

    async fn drop_namespace(&self, namespace: &NamespaceIdent) -> Result<()> {
        self.inner.drop_namespace(namespace).await
    }

    async fn list_tables(&self, namespace: &NamespaceIdent) -> Result<Vec<TableIdent>> {
        self.inner.list_tables(namespace).await
    }

    async fn create_table(
        &self,
        namespace: &NamespaceIdent,
        creation: TableCreation,
    ) -> Result<Table> {
        self.inner.create_table(namespace, creation).await
    }

    /// The table as checked, for the pinned one; others from the catalog.
    async fn load_table(&self, table: &TableIdent) -> Result<Table> {
        if table == self.table.identifier() {
            Ok(self.table.clone())
        } else {
            self.inner.load_table(table).await
        }
    }

    async fn drop_table(&self, table: &TableIdent) -> Result<()> {
        self.inner.drop_table(table).await
    }

    async fn purge_table(&self, table: &TableIdent) -> Result<()> {
        self.inner.purge_table(table).await
    }

    async fn table_exists(&self, table: &TableIdent) -> Result<bool> {
        self.inner.table_exists(table).await
    }

    async fn rename_table(&self, src: &TableIdent, dest: &TableIdent) -> Result<()> {
        self.inner.rename_table(src, dest).await
    }

    async fn register_table(&self, table: &TableIdent, metadata_location: String) -> Result<Table> {
        self.inner.register_table(table, metadata_location).await
    }

    /// The commit, whose conflict is final here: the committer reads the table again.
    async fn update_table(&self, commit: TableCommit) -> Result<Table> {
        self.inner.update_table(commit).await.map_err(|e| {
            if e.kind() == ErrorKind::CatalogCommitConflicts {
                Error::new(ErrorKind::CatalogCommitConflicts, e.message().to_owned())
            } else {
                e
            }
        })
    }
}
